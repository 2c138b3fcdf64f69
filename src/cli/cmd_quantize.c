/* cmd_quantize.c — `nextn quantize`: an mlx-community-style quantized copy
 * of a dense checkpoint (nx_quantize). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *quantize_help =
    "usage: nextn quantize [-m IN] -o OUT (--bits B [--group-size G] | --mode mxfp4|nvfp4|mxfp8)\n"
    "                      [--keep-mtp-dense]\n"
    "Writes OUT as an MLX-quantized checkpoint of the dense checkpoint IN\n"
    "(mlx-community layout and names, quantization block in config.json; the MTP\n"
    "head quantized too unless --keep-mtp-dense).\n\n"
    "  -m, --model IN     dense checkpoint (default: $NEXTN_MODEL, else the bundled model)\n"
    "  -o, --out OUT      output directory (created if missing)\n"
    "  --bits B           affine: 2, 3, 4, 5, 6 or 8\n"
    "  --group-size G     affine: 32, 64 or 128 (default 64); a small-float mode's\n"
    "                     own group may be given too\n"
    "  --mode M           affine (the default), or a small-float mode with its own\n"
    "                     bits and group: mxfp4 (4, 32), nvfp4 (4, 16), mxfp8 (8, 32)\n"
    "  --keep-mtp-dense   leave the MTP head's matrices as they are\n";

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    nx_quantize_opts o = {0, 0, 0, NX_QUANT_AFFINE};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long k;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(quantize_help, stdout); return 0; }
        if (strcmp(a, "--keep-mtp-dense") == 0) { o.keep_mtp_dense = 1; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) in = v;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--bits") == 0) {
            if (cli_parse_int(v, 2, 8, &k) || k == 7) return cli_usage_error("quantize: --bits wants 2, 3, 4, 5, 6 or 8, got '%s'", v);
            o.bits = (int)k;
        } else if (strcmp(a, "--group-size") == 0) {
            if (cli_parse_int(v, 16, 128, &k) || (k != 16 && k != 32 && k != 64 && k != 128))
                return cli_usage_error("quantize: --group-size wants 16 (nvfp4), 32, 64 or 128, got '%s'", v);
            o.group_size = (int)k;
        } else if (strcmp(a, "--mode") == 0) {
            int found = -1;
            for (int j = NX_QUANT_AFFINE; j <= NX_QUANT_MXFP8; j++)
                if (strcmp(v, nx_quant_mode_info((nx_quant_mode)j, NULL, NULL)) == 0) found = j;
            if (found < 0) return cli_usage_error("quantize: --mode wants affine, mxfp4, nvfp4 or mxfp8, got '%s'", v);
            o.mode = (nx_quant_mode)found;
        } else {
            return cli_usage_error("quantize: unknown option '%s' (see nextn quantize --help)", a);
        }
    }
    if (!out) return cli_usage_error("quantize: -o OUT is required");
    if (!o.bits && o.mode == NX_QUANT_AFFINE) return cli_usage_error("quantize: --bits is required for affine (or give --mode mxfp4, nvfp4 or mxfp8)");
    if (o.mode == NX_QUANT_AFFINE && o.group_size == 16)
        return cli_usage_error("quantize: --group-size 16 is nvfp4's; affine takes 32, 64 or 128");
    int mode_bits, mode_group;
    const char *mode_name = nx_quant_mode_info(o.mode, &mode_bits, &mode_group);
    if (o.mode != NX_QUANT_AFFINE && ((o.bits && o.bits != mode_bits) || (o.group_size && o.group_size != mode_group)))
        return cli_usage_error("quantize: --mode %s takes bits %d and group size %d (leave --bits and --group-size out)",
                               mode_name, mode_bits, mode_group);
    if (!in) in = cli_default_model();
    char err[1024];
    nx_quantize_report r;
    if (nx_quantize(in, out, &o, &r, err, sizeof err)) return cli_fail("%s", err);
    printf("%s -> %s: %lld tensors, %lld quantized (%s, %d bits, group %d)%s; %.1f MiB -> %.1f MiB\n", in, out,
           (long long)r.tensors, (long long)r.quantized, mode_name, r.bits, r.group_size,
           o.keep_mtp_dense ? ", MTP head dense" : "",
           (double)r.bytes_in / (1 << 20), (double)r.bytes_out / (1 << 20));
    return 0;
}
