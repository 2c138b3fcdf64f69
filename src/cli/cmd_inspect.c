/* cmd_inspect.c — `nextn inspect`: what a checkpoint contains. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *inspect_help =
    "usage: nextn inspect [-m DIR] [--json]\n"
    "Loads and validates a checkpoint and prints its architecture, sizes, layer\n"
    "pattern, dtypes, tied head, MTP tensors and quantization.\n\n" CLI_MODEL_HELP
    "  --json             one JSON object instead of text\n";

int cmd_inspect(int argc, char **argv) {
    cli_model_opts mo = {0};
    int json = 0;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &mo);
        if (r < 0) return 2;
        if (r) continue;
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { fputs(inspect_help, stdout); return 0; }
        else return cli_usage_error("inspect: unknown option '%s' (see nextn inspect --help)", argv[i]);
    }
    nx_model *m = cli_load_model(&mo);
    if (!m) return 1;
    const nx_model_info *in = nx_model_get_info(m);
    char eos[64 * 12] = "";   /* every id (the config holds at most 32) */
    for (int i = 0, o = 0; i < in->n_eos && o < (int)sizeof eos - 12; i++)
        o += snprintf(eos + o, sizeof eos - (size_t)o, "%s%d", i ? "," : "", in->eos_ids[i]);
    if (json) {
        printf("{\"dir\":");
        cli_json_string(stdout, in->dir, strlen(in->dir));
        printf(",\"model_type\":\"%s\",\"layout\":\"%s\",\"weight_dtype\":\"%s\","
               "\"vocab_size\":%d,\"hidden_size\":%d,\"num_hidden_layers\":%d,\"intermediate_size\":%d,"
               "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,\"rotary_dim\":%d,"
               "\"linear_num_key_heads\":%d,\"linear_num_value_heads\":%d,\"linear_key_head_dim\":%d,"
               "\"linear_value_head_dim\":%d,\"linear_conv_kernel_dim\":%d,\"layer_pattern\":\"%s\","
               "\"full_attention_layers\":%d,\"linear_attention_layers\":%d,\"rope_theta\":%g,\"rms_norm_eps\":%g,"
               "\"tie_word_embeddings\":%s,\"mtp\":%s,\"mtp_tensors\":%d,\"eos_token_ids\":[%s],\"params\":%lld,"
               "\"weight_bytes\":%lld,\"files\":%d,\"tensors\":%d,\"quantization\":\"%s\"}\n",
               in->model_type, in->layout, in->weight_dtype, in->vocab_size, in->hidden_size, in->n_layers,
               in->intermediate_size, in->n_heads, in->n_kv_heads, in->head_dim, in->rotary_dim, in->linear_k_heads,
               in->linear_v_heads, in->linear_k_dim, in->linear_v_dim, in->conv_kernel, in->layer_pattern,
               in->n_full_attention, in->n_linear_attention, in->rope_theta, in->rms_norm_eps,
               in->tie_word_embeddings ? "true" : "false", in->has_mtp ? "true" : "false", in->n_mtp_tensors, eos,
               (long long)in->n_params, (long long)in->weight_bytes, in->n_files, in->n_tensors, in->quantization);
    } else {
        printf("checkpoint      %s (%d file%s, %d tensors, %.1f MiB)\n", in->dir, in->n_files, in->n_files == 1 ? "" : "s",
               in->n_tensors, (double)in->weight_bytes / (1 << 20));
        printf("model_type      %s, %s layout, weights %s, quantization %s\n", in->model_type, in->layout,
               in->weight_dtype, in->quantization);
        printf("parameters      %.2f M (main stack)\n", (double)in->n_params / 1e6);
        printf("dims            hidden %d, layers %d, ffn %d, vocab %d\n", in->hidden_size, in->n_layers,
               in->intermediate_size, in->vocab_size);
        printf("layers          %s  (%d Gated DeltaNet 'L', %d full attention 'A')\n", in->layer_pattern,
               in->n_linear_attention, in->n_full_attention);
        printf("attention       %d query / %d kv heads x %d, rotary dim %d, theta %g\n", in->n_heads, in->n_kv_heads,
               in->head_dim, in->rotary_dim, in->rope_theta);
        printf("gated deltanet  %d key / %d value heads, key dim %d, value dim %d, conv %d\n", in->linear_k_heads,
               in->linear_v_heads, in->linear_k_dim, in->linear_v_dim, in->conv_kernel);
        printf("lm_head         %s\n", in->tie_word_embeddings ? "tied to embed_tokens" : "separate");
        printf("mtp head        %s (%d tensors%s)\n", in->has_mtp ? "present" : "absent", in->n_mtp_tensors,
               in->has_mtp && !in->n_mtp_tensors ? ", in mtp.safetensors" : "");
        printf("eos ids         %s\n", eos);
    }
    nx_model_free(m);
    return 0;
}
