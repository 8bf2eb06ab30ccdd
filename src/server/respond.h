/* respond.h — the JSON the server sends: OpenAI response objects, Server-Sent Events chunks,
 * errors. Field names follow OpenAI's API; `timings` follows llama-server's, with the
 * speculative figures (draft_n, draft_n_accepted, tau). Callers hold srv.mu while a job is read. */
#ifndef SPECULA_SERVER_RESPOND_H
#define SPECULA_SERVER_RESPOND_H

#include <jansson.h>

#include "server/server_internal.h"

/* {"error": {"message", "type", "param", "code"}} as text (malloc'd) */
char *sp_srv_error_json(const srv_error *e);
/* llama-server style timings of a job, with the speculative figures */
json_t *sp_srv_timings_json(const srv_job *j);
/* The complete response of a finished non-streaming job (malloc'd text). */
char *sp_srv_response_final(srv *s, srv_job *j, time_t created);
/* One SSE event "data: {...}\n\n" with the text delta j->text[from, to) and the logprobs of tokens
 * [tok_from, tok_to); finish: NULL or the finish_reason; first: the chat chunk that carries
 * the role. Appended to out. */
int sp_srv_sse_chunk(srv *s, srv_job *j, time_t created, size_t from, size_t to, int tok_from, int tok_to,
                  const char *finish, int first, srv_buf *out);
/* With logprobs: the end of the tokens [from, k) a chunk that has released the text up to byte to
 * carries: each token whose text is all released and begins before to (a token of no text waits
 * for the next one, or for the end). Without logprobs: j->n_toks. */
int sp_srv_stream_toks(const srv_job *j, int from, size_t to);
/* The closing events of a finished job: the text still held back (text_sent on) with the logprobs
 * of its tokens (toks_sent on, up to those of the content: as in the non-streamed response), then,
 * for a chat whose text holds tool calls, their delta.tool_calls chunks and finish_reason
 * "tool_calls"; else the chunk with the job's finish_reason. */
int sp_srv_sse_finish(srv *s, srv_job *j, time_t created, size_t text_sent, int toks_sent, srv_buf *out);
/* The last events: the usage chunk (when asked for) and "data: [DONE]". */
int sp_srv_sse_end(srv *s, srv_job *j, time_t created, srv_buf *out);

#endif
