/* cmd_chat.c — `nextn chat-template`: render a conversation to the prompt
 * text the model sees. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *chat_help =
    "usage: nextn chat-template [-m DIR | --chat-template FILE] --messages F.json [--tools F.json]\n"
    "                           [--add-generation-prompt] [--thinking on|off]\n"
    "Renders an OpenAI-style conversation with the checkpoint's chat template and\n"
    "prints the prompt text, byte for byte.\n\n"
    "  -m, --model DIR          use the chat_template of DIR's tokenizer_config.json (default:\n"
    "                           $NEXTN_MODEL, else the bundled model)\n"
    "  --chat-template FILE     a chat template file (Jinja text of a known Qwen template,\n"
    "                           or the nextn format of docs/chat-templates.md; also spelled\n"
    "                           --template here, not in generate and serve)\n"
    "  --messages F             a JSON array of messages\n"
    "  --tools F                a JSON array of tools\n"
    "  --add-generation-prompt  end with the assistant turn opener\n"
    "  --thinking on|off        enable_thinking (default: the template's own default)\n";

int cmd_chat_template(int argc, char **argv) {
    const char *dir = NULL, *tmpl = NULL, *msgs = NULL, *tools = NULL, *thinking = NULL;
    int gen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(chat_help, stdout); return 0; }
        if (strcmp(a, "--add-generation-prompt") == 0) { gen = 1; continue; }
        const char **slot = strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0 ? &dir
                            : strcmp(a, "--template") == 0 || strcmp(a, "--chat-template") == 0 ? &tmpl
                            : strcmp(a, "--messages") == 0                  ? &msgs
                            : strcmp(a, "--tools") == 0                     ? &tools
                            : strcmp(a, "--thinking") == 0                  ? &thinking
                                                                            : NULL;
        if (!slot) return cli_usage_error("chat-template: unknown option '%s' (see nextn chat-template --help)", a);
        if (!(*slot = cli_value(argc, argv, &i))) return 2;
    }
    if (!msgs) return cli_usage_error("chat-template: --messages is required");
    if (dir && tmpl) return cli_usage_error("chat-template: give -m or --chat-template, not both");
    if (thinking && strcmp(thinking, "on") != 0 && strcmp(thinking, "off") != 0)
        return cli_usage_error("chat-template: --thinking wants on or off, got '%s'", thinking);

    int rc = 1;
    char err[1024], *out = NULL, *mtext = NULL, *ttext = NULL;
    nx_tokenizer *tok = NULL;
    nx_chat_template *ct = NULL;
    if (!(mtext = cli_read_file(msgs, NULL))) { cli_fail("%s: cannot read: %s", msgs, strerror(errno)); goto done; }
    if (tools && !(ttext = cli_read_file(tools, NULL))) { cli_fail("%s: cannot read: %s", tools, strerror(errno)); goto done; }
    if (!tmpl && !(tok = cli_load_tokenizer(dir))) goto done;
    if (!(ct = cli_load_chat_template(tmpl, tok, dir))) goto done;
    nx_chat_request req = {mtext, ttext, gen, thinking ? strcmp(thinking, "on") == 0 : -1};
    nx_status st = nx_chat_render(ct, &req, &out, err, sizeof err);
    if (st == NX_EFORMAT) { cli_fail("%s / %s: %s", msgs, tools ? tools : "no tools", err); goto done; }
    if (st) { cli_fail("%s", err); goto done; }
    fputs(out, stdout);
    rc = 0;
done:
    nx_free(out);
    free(mtext);
    free(ttext);
    nx_chat_template_free(ct);
    nx_tokenizer_free(tok);
    return rc;
}
