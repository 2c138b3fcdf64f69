/* complete.c — POST /v1/chat/completions and /v1/completions.
 *
 *   body --oai_parse_request--> request --render (chat) + tokenize--> prompt ids
 *        --nx_engine_submit--> tokens --detokenize--> text --oai_output--> deltas
 *        --> one JSON body, or SSE chunks: "data: {chunk}\n\n" ... "data: [DONE]\n\n"
 *
 * The prefix cache needs to know where a chat's reusable prefix ends: the
 * next turn renders this turn's assistant message differently from the
 * generation prompt (Qwen templates drop the <think> block of earlier turns),
 * so the checkpoint goes where the two renderings part. We find that point by
 * rendering the conversation as the next turn will see it (plus a placeholder
 * assistant reply and user message) and taking the common token prefix with
 * this prompt: no template-specific knowledge needed. The same trick marks
 * the end of the system prompt and tools, which other conversations share.
 *
 * Nothing here blocks: libmicrohttpd runs an epoll loop on a small thread
 * pool. A generation with nothing to send parks its connection
 * (MHD_suspend_connection) until the engine has more: the engine's notify
 * hook marks it, and the server's watch thread resumes it (never from the
 * engine thread, which holds the request's lock there). The same thread
 * polls parked and running connections' sockets every GEN_WATCH_MS: a client
 * that went away (peer_gone), or a server shutting down, cancels the request,
 * which frees its row and ends the response.
 *
 *   handler/reader: pump (non-blocking read) -> data? send : park()
 *   engine:         new output -> wake(): flag, and queue for resume if parked
 *   watch thread:   resume queued; cancel on hang-up or shutdown */
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/err.h"
#include "server/http.h"
#include "server/oai.h"

#define GEN_READ 64          /* tokens taken from the engine per read        */
#define GEN_WATCH_MS 50      /* how often the watch thread checks sockets     */

/* One generation in flight: what a non-stream handler or a stream's content
 * reader pumps. */
struct srv_gen {
    nx_server *s;
    struct MHD_Connection *c;
    struct srv_gen *next;         /* the server's list (s->gens, under s->mu)   */
    struct srv_gen *wnext;        /* the resume queue (under s->wake_mu)        */
    pthread_mutex_t mu;           /* suspended, wake, queued                    */
    int queued;                   /* in the resume queue                        */
    int suspended;                /* parked: MHD does not process it            */
    int wake;                     /* output arrived since the last pump         */
    int fd;                       /* the client's socket, polled for hang-ups   */
    int chat, stream;
    nx_request *rq;
    double t_submit;              /* nx_now_s() when rq was submitted          */
    nx_detok_stream *detok;
    oai_output *out;
    oai_meta meta;
    char id[64];
    char *model;
    int n_prompt, n_completion;
    /* logprobs on: the entries of tokens read but not yet sent, each with its
     * offset in the output text (characters) */
    int logprobs;
    nx_token_logprob *lp;
    int *lp_off;
    int n_lp, cap_lp;
    long chars;                   /* characters the decoder has given so far  */
    /* completions' echo: the prompt's text (and entries) go first, once the
     * engine has read the prompt; score_only: the one token generated for a
     * max_tokens 0 request is not part of the answer */
    int echo, echoed, score_only;
    int32_t *prompt;              /* [n_prompt] with echo                      */
    atomic_int peer_cut;          /* cancelled by the watch thread: the client hung up */
    int done;                     /* generation over (engine finished, or a stop string) */
    nx_finish fin;
    int error;                    /* the engine failed                          */
    char errmsg[600];
    /* stream output waiting to be sent */
    char *buf;
    size_t len, off, cap;
    int eos;                      /* [DONE] is in buf                           */
    int oom;
};
typedef struct srv_gen gen;

/* A generation for connection c, counted in flight until gen_free (and
 * listed for the watch thread once its request exists: gen_list). NULL when
 * out of memory, or when the server is shutting down (*closing set): the
 * check and the count are one step under s->mu, so nx_server_stop, which
 * sets `closing` before it reads the count, never misses a generation. */
static gen *gen_new(nx_server *s, struct MHD_Connection *c, int chat, int stream, int *closing) {
    gen *g = calloc(1, sizeof *g);
    *closing = 0;
    if (!g) return NULL;
    pthread_mutex_lock(&s->mu);
    if ((*closing = atomic_load(&s->closing)) == 0) s->in_flight++, s->streams_open += stream;
    pthread_mutex_unlock(&s->mu);
    if (*closing) {
        free(g);
        return NULL;
    }
    g->s = s;
    g->c = c;
    g->chat = chat;
    g->stream = stream;
    g->fin = NX_FINISH_NONE;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

/* Lists g (its request submitted) for the watch thread. */
static void gen_list(gen *g) {
    pthread_mutex_lock(&g->s->mu);
    g->next = g->s->gens;
    g->s->gens = g;
    pthread_mutex_unlock(&g->s->mu);
}

/* The request's log line, for every request the engine took: sizes, cache
 * reuse, speed, how it ended. One that never finished (its client went
 * away, or the server stopped first) is "cancelled", and its speed is
 * measured up to now: the engine has not stamped its end yet. */
static void log_done(const gen *g) {
    static const char *const how[] = {"running", "stop", "length", "cancelled", "error"};
    nx_request_info in;
    nx_request_get_info(g->rq, &in);
    const double total = in.total_s > 0 ? in.total_s : nx_now_s() - g->t_submit;
    const int ended = g->done && g->fin != NX_FINISH_NONE;
    nx_logf(g->s->o.log, g->s->o.log_ctx, "%s %s: prompt %d (cached %d), output %d, ttft %.0f ms, %.1f tok/s, MTP %lld/%lld accepted, %s",
            g->chat ? "chat" : "completion", g->stream ? "stream" : "whole", in.prompt_tokens, in.cached_tokens,
            in.completion_tokens, in.ttft_s * 1e3,
            in.completion_tokens > 1 && total > in.ttft_s ? (in.completion_tokens - 1) / (total - in.ttft_s) : 0.0,
            (long long)in.accepted, (long long)in.drafted, ended ? how[g->fin] : how[NX_FINISH_CANCELLED]);
}

static void gen_free(gen *g) {
    if (!g) return;
    nx_server *s = g->s;
    pthread_mutex_lock(&s->mu);
    for (gen **p = &s->gens; *p; p = &(*p)->next)
        if (*p == g) {
            *p = g->next;
            break;
        }
    s->in_flight--;
    s->streams_open -= g->stream;
    pthread_mutex_unlock(&s->mu);
    if (g->rq) log_done(g);
    nx_request_free(g->rq); /* after this no wake() comes */
    pthread_mutex_destroy(&g->mu);
    nx_detok_stream_free(g->detok);
    oai_output_free(g->out);
    free(g->lp);
    free(g->lp_off);
    nx_free(g->prompt);
    free(g->model);
    free(g->buf);
    free(g);
}

/* ---- stream buffer ---------------------------------------------------------- */

static void put(gen *g, const char *a, size_t n) {
    if (g->oom) return;
    if (g->len + n > g->cap) {
        size_t cap = g->cap ? g->cap : 4096;
        while (cap < g->len + n) cap *= 2;
        char *p = realloc(g->buf, cap);
        if (!p) {
            g->oom = 1;
            return;
        }
        g->buf = p, g->cap = cap;
    }
    memcpy(g->buf + g->len, a, n);
    g->len += n;
}

/* Frames one JSON chunk as a server-sent event (takes ownership of json). */
static void put_event(gen *g, char *json) {
    if (!json) {
        g->oom = 1;
        return;
    }
    put(g, "data: ", 6);
    put(g, json, strlen(json));
    put(g, "\n\n", 2);
    free(json);
}

/* The entries waiting to be sent, for a builder (NULL without logprobs). */
static const oai_logprobs *pending(const gen *g, oai_logprobs *l) {
    if (!g->logprobs) return NULL;
    *l = (oai_logprobs){g->s->o.tokenizer, g->lp, g->n_lp, g->lp_off};
    return l;
}

/* Queues token entry x, at offset `at` of the output text. */
static void pend(gen *g, const nx_token_logprob *x, long at) {
    if (g->n_lp == g->cap_lp) {
        int cap = g->cap_lp ? 2 * g->cap_lp : GEN_READ;
        nx_token_logprob *lp = realloc(g->lp, (size_t)cap * sizeof *lp);
        if (lp) g->lp = lp;
        int *off = lp ? realloc(g->lp_off, (size_t)cap * sizeof *off) : NULL;
        if (off) g->lp_off = off;
        if (!off) {
            g->oom = 1;
            return;
        }
        g->cap_lp = cap;
    }
    g->lp[g->n_lp] = *x;
    g->lp_off[g->n_lp++] = at > INT32_MAX ? INT32_MAX : (int)at;
}

/* A chunk carries the entries of the tokens read since the last one. */
static void put_delta(gen *g, const oai_delta *d) {
    if (!g->stream || oai_delta_empty(d)) return;
    oai_logprobs l;
    const oai_logprobs *lp = pending(g, &l);
    put_event(g, g->chat ? oai_chat_chunk_json(&g->meta, d, 0, NULL, lp) : oai_text_chunk_json(&g->meta, d, NULL, lp));
    g->n_lp = 0;
}

static oai_usage usage_of(const gen *g) {
    nx_request_info info = {0};
    if (g->rq) nx_request_get_info(g->rq, &info);
    return (oai_usage){g->n_prompt, g->n_completion, info.cached_tokens};
}

/* A row cut short (the context, max_tokens, or the server shutting down)
 * reports "length": the client must not take a truncated answer as whole. */
static const char *finish_reason(const gen *g) {
    /* scoring only: the token the engine made (a stop id or not) is not output */
    if (g->score_only) return "length";
    return oai_finish_reason(g->out, g->fin == NX_FINISH_LENGTH || g->fin == NX_FINISH_CANCELLED);
}

/* The end of a stream: the last chunk with finish_reason, usage, [DONE]. */
static void put_end(gen *g) {
    if (g->error) {
        char *e = oai_error_json(g->errmsg, "server_error", NULL, NULL);
        put_event(g, e);
    } else {
        const char *why = finish_reason(g);
        oai_logprobs l;   /* the last chunk takes the entries no text has carried */
        const oai_logprobs *lp = g->n_lp ? pending(g, &l) : NULL;
        put_event(g, g->chat ? oai_chat_chunk_json(&g->meta, NULL, 0, why, lp) : oai_text_chunk_json(&g->meta, NULL, why, lp));
        g->n_lp = 0;
        if (g->meta.include_usage) put_event(g, oai_usage_chunk_json(&g->meta, g->chat, usage_of(g)));
    }
    put(g, "data: [DONE]\n\n", 14);
    g->eos = 1;
}

/* ---- generation ---------------------------------------------------------------- */

/* 1 if the client is gone. A whole response counts a client that closed its
 * sending side (POLLRDHUP) as gone: nothing else tells a client that went
 * away from one that merely half-closed (HTTP/1.1 allows that; socat and
 * nc -N do it), and a row must not stay busy for nobody; that answer is then
 * an error, never a truncated one (srv_complete_whole). A stream writes as
 * it goes, so a half-closed client gets its whole stream: one that went
 * away fails a write, MHD ends the response (stream_free cancels the
 * request) and the socket reports POLLHUP / POLLERR. */
static int peer_gone(const gen *g) {
    if (g->fd < 0) return 0;
    struct pollfd p = {g->fd, POLLRDHUP, 0};
    short gone = (short)(POLLHUP | POLLERR | (g->stream ? 0 : POLLRDHUP));
    return poll(&p, 1, 0) > 0 && (p.revents & gone);
}

/* The engine's notify hook (engine thread, under the request's lock): mark
 * the generation, and if its connection is parked, queue it for the watch
 * thread to resume. */
static void wake(void *ctx) {
    gen *g = ctx;
    nx_server *s = g->s;
    /* queued is g's own state (under g->mu), cleared by the watch thread
     * together with suspended: g enters the queue at most once, and only
     * while parked, so it cannot be freed while it is in the queue */
    pthread_mutex_lock(&g->mu);
    g->wake = 1;
    int enqueue = g->suspended && !g->queued;
    if (enqueue) g->queued = 1;
    pthread_mutex_unlock(&g->mu);
    if (!enqueue) return;
    pthread_mutex_lock(&s->wake_mu);
    g->wnext = s->wake_head;
    s->wake_head = g;
    pthread_cond_signal(&s->wake_cv);
    pthread_mutex_unlock(&s->wake_mu);
}

/* After a pump found nothing to send: parks the connection and returns 1,
 * or returns 0 when output arrived meanwhile (pump again). */
static int park(gen *g) {
    pthread_mutex_lock(&g->mu);
    int parked = !g->wake;
    g->wake = 0;
    if (parked) {
        g->suspended = 1;
        MHD_suspend_connection(g->c);
    }
    pthread_mutex_unlock(&g->mu);
    return parked;
}

/* The watch thread: resumes woken connections; every GEN_WATCH_MS cancels
 * the requests of clients that hung up, or of every client at shutdown. A
 * parked generation cannot be freed (MHD does not touch its connection until
 * it is resumed), so the queue never holds a freed one; after the resume
 * call the thread does not touch it again. */
static void *watch_main(void *arg) {
    nx_server *s = arg;
    double next_check = 0;
    pthread_mutex_lock(&s->wake_mu);
    while (!s->watch_stop) {
        while (s->wake_head) {
            gen *g = s->wake_head;
            s->wake_head = g->wnext;
            pthread_mutex_unlock(&s->wake_mu);
            pthread_mutex_lock(&g->mu);
            struct MHD_Connection *c = g->suspended ? g->c : NULL;
            g->suspended = 0;
            g->queued = 0;
            pthread_mutex_unlock(&g->mu);
            /* last: once resumed, an event thread may finish the response and
             * free g at once */
            if (c) MHD_resume_connection(c);
            pthread_mutex_lock(&s->wake_mu);
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double t = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
        if (t >= next_check) {
            pthread_mutex_unlock(&s->wake_mu);
            int closing = atomic_load(&s->closing);
            pthread_mutex_lock(&s->mu);
            for (gen *g = s->gens; g; g = g->next) {
                if (closing) nx_request_cancel(g->rq);
                else if (peer_gone(g)) {
                    atomic_store(&g->peer_cut, 1);   /* before the cancel its reader may see */
                    nx_request_cancel(g->rq);
                }
            }
            pthread_mutex_unlock(&s->mu);
            pthread_mutex_lock(&s->wake_mu);
            next_check = t + GEN_WATCH_MS * 1e-3;
            continue;
        }
        struct timespec until = now;
        until.tv_nsec += GEN_WATCH_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->wake_cv, &s->wake_mu, &until);
    }
    pthread_mutex_unlock(&s->wake_mu);
    return NULL;
}

void srv_watch_init(nx_server *s) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->wake_mu, NULL);
}

void srv_watch_destroy(nx_server *s) {
    pthread_mutex_destroy(&s->wake_mu);
    pthread_cond_destroy(&s->wake_cv);
}

int srv_watch_start(nx_server *s) { return pthread_create(&s->watch, NULL, watch_main, s) == 0 ? 0 : -1; }

void srv_watch_stop(nx_server *s) {
    pthread_mutex_lock(&s->wake_mu);
    s->watch_stop = 1;
    pthread_cond_signal(&s->wake_cv);
    pthread_mutex_unlock(&s->wake_mu);
    pthread_join(s->watch, NULL);
}

void srv_release_parked(nx_server *s) {
    pthread_mutex_lock(&s->mu);
    for (gen *g = s->gens; g; g = g->next) {
        nx_request_cancel(g->rq);
        /* a queued one is the watch thread's to resume (it will pop it) */
        pthread_mutex_lock(&g->mu);
        struct MHD_Connection *c = g->suspended && !g->queued ? g->c : NULL;
        if (c) g->suspended = 0;
        pthread_mutex_unlock(&g->mu);
        if (c) MHD_resume_connection(c);
    }
    pthread_mutex_unlock(&s->mu);
}

static void push_text(gen *g, const char *text, size_t n) {
    oai_delta d;
    if (!n || g->done) return;
    if (oai_output_push(g->out, text, n, &d) != 0) {
        g->oom = 1;
        return;
    }
    put_delta(g, &d);
    if (d.stopped) { /* a stop string: the rest of the output is not wanted */
        nx_request_cancel(g->rq);
        g->done = 1;
        g->fin = NX_FINISH_STOP;
    }
}

/* Finishes the text: flushes the decoder and the assembler. */
static void gen_close(gen *g) {
    size_t n;
    const char *tail = nx_detok_stream_flush(g->detok, &n);
    push_text(g, tail, n);
    oai_delta d;
    if (oai_output_finish(g->out, &d) != 0) g->oom = 1;
    else put_delta(g, &d);
    g->done = 1;
}

/* Ends the output now, at shutdown: a connection must not park once the
 * server is stopping (MHD_stop_daemon does not survive a parked one). The
 * answer so far goes out, finish_reason "length". */
static void gen_cut(gen *g) {
    nx_request_cancel(g->rq);
    g->fin = NX_FINISH_CANCELLED;
    gen_close(g);
}

/* Characters (code points) in n bytes of UTF-8: what text_offset counts. */
static long utf8_chars(const char *t, size_t n) {
    long c = 0;
    for (size_t k = 0; k < n; k++) c += ((unsigned char)t[k] & 0xC0) != 0x80;
    return c;
}

/* The echoed prompt: its text as its tokens decode (special tokens written
 * out), and with logprobs an entry a token -- the first has none (n_top -1),
 * nor has any the engine did not score (a request ended early). Runs once
 * the engine has read the whole prompt (an output token or the finish came). */
static void echo_prompt(gen *g) {
    g->echoed = 1;
    nx_detok_stream *ds = NULL;
    size_t cap = 64, len = 0;
    char *text = malloc(cap);
    nx_token_logprob *scored = g->logprobs ? malloc((size_t)g->n_prompt * sizeof *scored) : NULL;
    int n_scored = scored ? nx_request_read_prompt_logprobs(g->rq, scored, g->n_prompt - 1) : 0;
    if (!text || (g->logprobs && !scored) || nx_detok_stream_new(g->s->o.tokenizer, 0, &ds, NULL, 0) != NX_OK) {
        g->oom = 1;
        goto done;
    }
    for (int i = 0; i <= g->n_prompt; i++) {
        size_t n;
        const char *t = i < g->n_prompt ? nx_detok_stream_push(ds, g->prompt[i], &n) : nx_detok_stream_flush(ds, &n);
        if (i < g->n_prompt && g->logprobs) {
            nx_token_logprob none = {.id = g->prompt[i], .logprob = NAN, .n_top = -1};
            pend(g, i >= 1 && i <= n_scored ? &scored[i - 1] : &none, g->chars);
        }
        if (len + n + 1 > cap) {
            while (len + n + 1 > cap) cap *= 2;
            char *p = realloc(text, cap);
            if (!p) {
                g->oom = 1;
                goto done;
            }
            text = p;
        }
        memcpy(text + len, t, n);
        len += n;
        g->chars += utf8_chars(t, n);
    }
    oai_delta d;
    if (oai_output_echo(g->out, text, len, &d) != 0) g->oom = 1;
    else put_delta(g, &d);
done:
    nx_detok_stream_free(ds);
    free(scored);
    free(text);
}

/* Takes what the engine has produced so far (never waits) and runs it
 * through the decoder and the assembler. */
static void gen_pump(gen *g) {
    int32_t ids[GEN_READ];
    nx_token_logprob lps[GEN_READ];
    nx_finish fin;
    int n = nx_request_read_logprobs(g->rq, ids, g->logprobs ? lps : NULL, GEN_READ, 0, &fin);
    if (g->echo && !g->echoed && (n > 0 || fin != NX_FINISH_NONE)) echo_prompt(g);
    for (int i = 0; i < n && !g->done && !g->score_only; i++) {
        size_t len;
        const char *text = nx_detok_stream_push(g->detok, ids[i], &len);
        g->n_completion++;
        if (g->logprobs) pend(g, &lps[i], g->chars);   /* before its text: a delta it completes carries it */
        g->chars += utf8_chars(text, len);
        push_text(g, text, len);
    }
    if (g->done) return;
    if (fin != NX_FINISH_NONE) {
        g->fin = fin;
        if (fin == NX_FINISH_ERROR) {
            nx_request_info info;
            nx_request_get_info(g->rq, &info);
            g->error = 1;
            snprintf(g->errmsg, sizeof g->errmsg, "generation failed: %s", info.error);
        }
        gen_close(g);
    }
}

/* ---- streaming ------------------------------------------------------------------- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen *g = cls;
    while (g->off == g->len) {
        if (g->eos || g->oom) return g->oom ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        g->off = g->len = 0;
        if (!g->done) gen_pump(g);
        if (!g->done && g->len == 0 && atomic_load(&g->s->closing)) gen_cut(g);
        if (g->done) put_end(g);
        else if (g->len == 0 && park(g)) return 0; /* called again once resumed */
    }
    size_t n = g->len - g->off < max ? g->len - g->off : max;
    memcpy(buf, g->buf + g->off, n);
    g->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { gen_free(cls); /* cancels the request if it still runs */ }

/* ---- the prompt --------------------------------------------------------------------- */

static int tokenize(nx_server *s, const char *text, int32_t **ids, int *n, char *err, size_t errlen) {
    return nx_tokenize(s->o.tokenizer, text, strlen(text), NX_SPECIAL_PARSE, ids, n, err, errlen) == NX_OK ? 0 : -1;
}

/* Tokens the prompt ids[0..n) shares with the rendering of the messages
 * `msgs` (a JSON array) without a generation prompt; 0 if that fails. */
static int shared_prefix(nx_server *s, const oai_request *q, const char *msgs, const int32_t *ids, int n) {
    nx_chat_request cr = {msgs, q->tools_json, 0, q->enable_thinking};
    char *text = NULL;
    int32_t *other = NULL;
    int no = 0, common = 0;
    if (nx_chat_render(s->o.chat_template, &cr, &text, NULL, 0) == NX_OK && tokenize(s, text, &other, &no, NULL, 0) == 0)
        while (common < n && common < no && ids[common] == other[common]) common++;
    nx_free(text);
    nx_free(other);
    return common;
}

#define SRV_SYSTEM_MIN 64   /* tokens of system prompt + tools worth a checkpoint of their own */

/* The prompt's checkpoint boundaries (see the file comment): [0] where the
 * next turn's rendering of this conversation parts from the prompt (the
 * conversation plus a placeholder reply and question); [1] the end of the
 * system prompt and tools, shared by every conversation that starts the
 * same way (the first message if it is a system one, plus a placeholder
 * question), when that is at least SRV_SYSTEM_MIN tokens. */
static void chat_cache_at(nx_server *s, const oai_request *q, const char *messages_json, const int32_t *ids, int n,
                          int cache_at[NX_CACHE_POINTS]) {
    static const char reply[] = ",{\"role\":\"assistant\",\"content\":\"x\"},{\"role\":\"user\",\"content\":\"x\"}]";
    static const char ask[] = "{\"role\":\"user\",\"content\":\"x\"}]";
    cache_at[0] = cache_at[1] = 0;
    size_t ml = strlen(messages_json);
    char *msgs = ml >= 2 && messages_json[ml - 1] == ']' ? malloc(ml + sizeof reply) : NULL;
    if (msgs) {
        memcpy(msgs, messages_json, ml - 1);
        memcpy(msgs + ml - 1, reply, sizeof reply);
        cache_at[0] = shared_prefix(s, q, msgs, ids, n);
        free(msgs);
    }
    json_t *all = json_loads(messages_json, 0, NULL), *first = json_array_get(all, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    char *sys = role && strcmp(role, "system") == 0 ? json_dumps(first, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(all);
    if (!sys && !q->tools_json) return;
    size_t sl = sys ? strlen(sys) : 0;
    char *two = malloc(sl + sizeof ask + 2);
    if (two) {
        snprintf(two, sl + sizeof ask + 2, "[%s%s%s", sys ? sys : "", sys ? "," : "", ask);
        int at = shared_prefix(s, q, two, ids, n);
        if (at >= SRV_SYSTEM_MIN && at != cache_at[0]) cache_at[1] = at;
        free(two);
    }
    free(sys);
}

int srv_build_prompt(nx_server *s, struct MHD_Connection *c, const oai_request *q, int32_t **ids, int *n, int *think_open,
                        int cache_at[NX_CACHE_POINTS], enum MHD_Result *sent) {
    char err[600];
    char *text = NULL;
    *think_open = -1;
    cache_at[0] = cache_at[1] = 0;
    if (q->chat) {
        if (!s->o.chat_template) {
            *sent = srv_send_error(s, c, 400, "this model has no chat template: use /v1/completions", "invalid_request_error",
                                   "messages");
            return -1;
        }
        nx_chat_request cr = {q->messages_json, q->tools_json, 1, q->enable_thinking};
        if (nx_chat_render(s->o.chat_template, &cr, &text, err, sizeof err) != NX_OK) {
            const size_t el = strlen(err);
            if (q->odd_arguments[0] >= 0)   /* the likely cause, named */
                snprintf(err + el, sizeof err - el, " (messages[%d].tool_calls[%d].function.arguments is not a JSON object)",
                         q->odd_arguments[0], q->odd_arguments[1]);
            *sent = srv_send_error(s, c, 400, err, "invalid_request_error", "messages");
            return -1;
        }
        size_t tl = strlen(text);
        *think_open = tl >= 8 && strcmp(text + tl - 8, "<think>\n") == 0;
    }
    int bad = 0;
    if (q->prompt_ids) { /* already tokens: the engine checks them against the vocabulary */
        if (!(*ids = nx_alloc((size_t)q->n_prompt_ids * sizeof **ids))) {
            *sent = srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
            return -1;
        }
        memcpy(*ids, q->prompt_ids, (size_t)q->n_prompt_ids * sizeof **ids);
        *n = q->n_prompt_ids;
    } else {
        bad = tokenize(s, q->chat ? text : q->prompt, ids, n, err, sizeof err);
    }
    nx_free(text);
    if (bad || *n == 0) {
        *sent = srv_send_error(s, c, 400, bad ? err : "the prompt is empty", "invalid_request_error", q->chat ? "messages" : "prompt");
        nx_free(*ids);
        *ids = NULL;
        return -1;
    }
    if (q->chat) chat_cache_at(s, q, q->messages_json, *ids, *n, cache_at);
    return 0;
}

/* ---- the endpoint ---------------------------------------------------------------------- */

/* A whole (non-stream) response: sent once the generation is done; until
 * then the connection is parked and this runs again on every resume. */
enum MHD_Result srv_complete_whole(nx_server *s, struct MHD_Connection *c, srv_conn *conn) {
    gen *g = conn->gen;
    for (;;) {
        if (!g->done) gen_pump(g);
        if (!g->done && atomic_load(&s->closing)) gen_cut(g);
        if (g->done || g->oom) break;
        if (park(g)) return MHD_YES;
    }
    conn->gen = NULL;
    char *json = NULL;
    enum MHD_Result r;
    oai_logprobs l;
    const oai_logprobs *lp = pending(g, &l);
    if (g->error) r = srv_send_error(s, c, 500, g->errmsg, "server_error", NULL);
    else if (g->fin == NX_FINISH_CANCELLED && atomic_load(&g->peer_cut)) {
        /* a half-closed client may still read: it must not take what was cut
         * short for an answer (finish_reason "length" reads as max_tokens) */
        char msg[200];
        snprintf(msg, sizeof msg,
                 "the client closed its side of the connection; the request was cancelled after %d tokens "
                 "(keep it open until the response, or stream)",
                 g->n_completion);
        r = srv_send_error(s, c, 400, msg, "invalid_request_error", NULL);
    } else if (g->oom || !(json = g->chat ? oai_chat_completion_json(&g->meta, g->out, finish_reason(g), usage_of(g), lp)
                                        : oai_text_completion_json(&g->meta, g->out, finish_reason(g), usage_of(g), lp)))
        r = srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
    else r = srv_send_json(s, c, 200, json);
    free(json);
    gen_free(g);
    return r;
}

void srv_conn_gone(srv_conn *conn) {
    gen_free(conn->gen);
    conn->gen = NULL;
}

enum MHD_Result srv_complete(nx_server *s, struct MHD_Connection *c, srv_conn *conn, int chat, const char *body, size_t len) {
    if (atomic_load(&s->closing)) return srv_send_error(s, c, 503, "the server is shutting down", "server_error", NULL);
    oai_request q;
    int status;
    char err[600];
    const char *param;
    if (oai_parse_request(body, len, chat, &q, &status, &param, err, sizeof err) != 0)
        return srv_send_error(s, c, (unsigned)status, err, status == 400 ? "invalid_request_error" : "server_error", param);
    enum MHD_Result sent = MHD_NO;
    int32_t *ids = NULL;
    int n = 0, think_open, cache_at[NX_CACHE_POINTS];
    if (srv_build_prompt(s, c, &q, &ids, &n, &think_open, cache_at, &sent) != 0) {
        oai_request_free(&q);
        return sent;
    }
    int ctx = s->o.max_ctx;
    /* echo with max_tokens 0 scores the prompt only: the engine makes one
     * token, which the answer leaves out */
    int score_only = q.echo && q.max_tokens == 0;
    if (score_only) q.max_tokens = 1;
    /* prompt + completion <= the context (the engine's bound), and at least
     * one completion token */
    if (q.max_tokens == 0 || q.max_tokens > ctx - n || n > ctx - 1) {
        const int want = q.max_tokens > 0 ? q.max_tokens : 1;
        if (q.max_tokens == 0)
            snprintf(err, sizeof err, "%s must be at least 1%s", q.max_tokens_name, chat ? "" : " (or 0 with echo)");
        else
            snprintf(err, sizeof err,
                     "This model's maximum context length is %d tokens. However, you requested %lld tokens (%d in the %s, %d in the "
                     "completion). Please reduce the length of the %s or completion.",
                     ctx, (long long)n + want, n, chat ? "messages" : "prompt", want, chat ? "messages" : "prompt");
        const char *param = q.max_tokens == 0 ? q.max_tokens_name : chat ? "messages" : "prompt";
        nx_free(ids);
        oai_request_free(&q);
        return srv_send_error(s, c, 400, err, "invalid_request_error", param);
    }
    int closing;
    gen *g = gen_new(s, c, chat, q.stream, &closing);
    uint64_t idnum = srv_next_id(s);
    const int32_t *stop_ids;
    int n_stop = nx_tokenizer_stop_ids(s->o.tokenizer, &stop_ids);
    if (n_stop > 16) n_stop = 16; /* the engine's limit; tokenizers list two or three */
    /* a sampled request with a seed accepts a draft when the target's own
     * sample, drawn from the (seed, position) stream, equals it: the output
     * is exactly plain sampling's, whatever the drafting, so a seed gives
     * the same text under any load and any draft policy. Without a seed there
     * is nothing to repeat: rejection sampling with drafts drawn from the
     * head's distribution keeps the target's distribution and accepts far
     * more of them (the bundled model at temperature 1: 68% of drafts against
     * 18% for the head's argmax, which is what matching accepts) */
    nx_accept_mode accept = q.sampling.temperature <= 0 ? NX_ACCEPT_GREEDY
                            : q.seed_given             ? NX_ACCEPT_MATCH
                                                       : NX_ACCEPT_REJECTION;
    nx_request_opts ro = {.prompt = ids, .n_prompt = n, .cache_at = {cache_at[0], cache_at[1]},
                          .max_tokens = q.max_tokens > 0 ? q.max_tokens : 0, .sampling = q.sampling, .accept = accept,
                          .stop_ids = stop_ids, .n_stop = n_stop, .notify = wake, .notify_ctx = g,
                          .logprobs = q.logprobs, .top_logprobs = q.top_logprobs,
                          .prompt_logprobs = q.echo && q.logprobs};
    if (!q.seed_given) ro.sampling.seed = idnum;
    nx_status st = NX_ENOMEM;
    if (g) {
        g->n_prompt = n;
        g->logprobs = q.logprobs;
        g->echo = q.echo;
        g->score_only = score_only;
        if (q.echo) g->prompt = ids, ids = NULL;   /* the echo's */
        g->model = strdup(q.model ? q.model : s->model_name);
        oai_make_id(g->id, sizeof g->id, chat ? "chatcmpl-" : "cmpl-", idnum);
        g->meta = (oai_meta){g->id, (long long)time(NULL), g->model, q.stream && q.include_usage};
        g->out = oai_output_new(q.stop, q.n_stop, chat ? think_open : -1, chat && q.tools_json != NULL);
        if (g->out) oai_output_seed_ids(g->out, idnum);
        if (g->out && q.one_call) oai_output_one_call(g->out);
        if (g->out && chat && oai_output_tools(g->out, q.tools_json) != 0) {   /* out of memory */
            oai_output_free(g->out);
            g->out = NULL;
        }
        if (g->model && g->out && nx_detok_stream_new(s->o.tokenizer, 1, &g->detok, err, sizeof err) == NX_OK)
            g->t_submit = nx_now_s(), st = nx_engine_submit(s->o.engine, &ro, &g->rq, err, sizeof err);
    }
    nx_free(ids);
    oai_request_free(&q);
    if (st) {
        gen_free(g);
        if (closing) return srv_send_error(s, c, 503, "the server is shutting down", "server_error", NULL);
        if (st == NX_EBUSY) return srv_send_error(s, c, 503, "the server is busy: too many requests are waiting", "server_error", NULL);
        if (st == NX_ERANGE || st == NX_EINVAL) { /* the engine's messages name the logit bias or a prompt token */
            const char *param = strstr(err, "logit_bias") ? "logit_bias" : strstr(err, "prompt token") ? "prompt" : NULL;
            return srv_send_error(s, c, 400, err, "invalid_request_error", param);
        }
        return srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
    }
    gen_list(g);
    if (!g->stream) {
        conn->gen = g; /* the connection's until answered (or gone) */
        return srv_complete_whole(s, c, conn);
    }
    /* the first chunk goes out at once: the client sees the stream open */
    if (chat) put_event(g, oai_chat_chunk_json(&g->meta, NULL, 1, NULL, NULL));
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, g, stream_free);
    if (!r) {
        gen_free(g);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return srv_queue(s, c, 200, r); /* the response owns g now (stream_free) */
}
