/* http.h — what the server's files share (internal): the server object,
 * one connection's state, and the helpers that send a whole response.
 *
 *   server.c    the daemon: binding, routing, auth, request bodies, the small
 *               GET endpoints (/health, /v1/models, /metrics)
 *   complete.c  the completion endpoints: prompt -> engine request -> text
 *               assembly -> one JSON body or a stream of SSE chunks
 *   tokenize.c  token counts and ids for clients: /tokenize, /detokenize */
#ifndef NX_SERVER_HTTP_H
#define NX_SERVER_HTTP_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "nextn.h"
#include "server/oai.h"

struct nx_server {
    nx_server_opts o;
    char *host, *api_key, *model_name;   /* owned copies of the options' strings */
    struct MHD_Daemon *daemon;
    int port;
    atomic_int closing;                  /* set by nx_server_stop: streams end   */
    pthread_mutex_t mu;                  /* guards the counters below            */
    int64_t http[6];                     /* responses by class: 2xx..5xx, other  */
    int64_t by_code[600];
    int64_t streams_open;
    int64_t in_flight;                   /* completions not yet answered/closed  */
    uint64_t id_counter;                 /* response ids and default seeds       */
    struct srv_gen *gens;                /* generations in flight (complete.c)   */

    /* the watch thread (complete.c): resumes parked connections, cancels
     * the requests of clients that hung up */
    pthread_t watch;
    pthread_mutex_t wake_mu;             /* wake_head, watch_stop                */
    pthread_cond_t wake_cv;
    struct srv_gen *wake_head;           /* parked generations with new output   */
    int watch_stop;
};

/* One connection's request body, collected across handler calls. */
typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
    int answered;                        /* refused on its headers (401, 413)     */
    struct srv_gen *gen;                 /* a whole response being generated     */
} srv_conn;

/* Sends a JSON body (copied) with status; counts it. */
enum MHD_Result srv_send_json(nx_server *s, struct MHD_Connection *c, unsigned status, const char *json);
/* Sends {"error":{...}}: type e.g. "invalid_request_error"; param may be NULL. */
enum MHD_Result srv_send_error(nx_server *s, struct MHD_Connection *c, unsigned status, const char *message,
                               const char *type, const char *param);
/* Queues a prepared response and counts its status; destroys resp. */
enum MHD_Result srv_queue(nx_server *s, struct MHD_Connection *c, unsigned status, struct MHD_Response *resp);
/* A fresh number for ids and seeds. */
uint64_t srv_next_id(nx_server *s);

/* complete.c: POST /v1/chat/completions (chat = 1) and /v1/completions. */
enum MHD_Result srv_complete(nx_server *s, struct MHD_Connection *c, srv_conn *conn, int chat, const char *body, size_t len);
/* The prompt of a parsed request q as token ids (*ids: the caller frees
 * with nx_free): a chat rendered with the template (and a generation
 * prompt), a text tokenized, ids copied. *think_open: 1 when the rendering
 * ends in an open <think> block (-1 for text); cache_at: the prefix
 * boundaries worth a checkpoint. Returns 0, or -1 with the 400 (or 500) sent
 * and *sent its result. */
int srv_build_prompt(nx_server *s, struct MHD_Connection *c, const oai_request *q, int32_t **ids, int *n, int *think_open,
                     int cache_at[NX_CACHE_POINTS], enum MHD_Result *sent);
/* tokenize.c: POST /tokenize and /detokenize. */
enum MHD_Result srv_tokenize(nx_server *s, struct MHD_Connection *c, const char *body, size_t len);
enum MHD_Result srv_detokenize(nx_server *s, struct MHD_Connection *c, const char *body, size_t len);
/* The handler called again for a connection with conn->gen: a whole
 * response still being generated (parked and resumed). */
enum MHD_Result srv_complete_whole(nx_server *s, struct MHD_Connection *c, srv_conn *conn);
/* The connection ended: frees a generation it still holds. */
void srv_conn_gone(srv_conn *conn);
/* The watch thread: its lock and queue made before anything else
 * (srv_watch_init) and destroyed last; the thread runs from before the
 * daemon starts until after every request has been released. */
void srv_watch_init(nx_server *s);
void srv_watch_destroy(nx_server *s);
int srv_watch_start(nx_server *s);
void srv_watch_stop(nx_server *s);
/* Shutdown: cancels every listed generation's request and resumes the parked
 * ones, so MHD_stop_daemon finds no suspended connection. */
void srv_release_parked(nx_server *s);

#endif
