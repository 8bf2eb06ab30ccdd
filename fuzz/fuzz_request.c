/* fuzz_request.c — an HTTP request body through the server's parser (sp_srv_request_parse): the
 * first byte picks the route (chat, completion, tokenize, detokenize), the rest is the JSON
 * body. An accepted request's strings and ids are read back; a rejected one must carry an
 * HTTP error status and render as an OpenAI error object. */
#include "fuzz.h"
#include "server/request.h"
#include "server/respond.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet();
    if (size < 1) return 0;
    srv_route route = (srv_route)(data[0] % 4);
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (sp_srv_request_parse(route, (const char *)data + 1, size - 1, &r, &e) == 0) {
        for (int i = 0; i < r.n_msgs; i++) {
            if (r.msgs[i].role) fuzz_touch(r.msgs[i].role, strlen(r.msgs[i].role));
            if (r.msgs[i].content) fuzz_touch(r.msgs[i].content, strlen(r.msgs[i].content));
        }
        if (r.prompt_text) fuzz_touch(r.prompt_text, strlen(r.prompt_text));
        if (r.content) fuzz_touch(r.content, strlen(r.content));
        if (r.n_prompt_ids > 0) fuzz_touch(r.prompt_ids, (size_t)r.n_prompt_ids * sizeof *r.prompt_ids);
        if (r.n_stop < 0 || r.n_stop > SRV_MAX_STOP) abort();
        for (int i = 0; i < r.n_stop; i++) fuzz_touch(r.stop[i], strlen(r.stop[i]));
        sp_srv_request_free(&r);
    } else {
        if (e.status < 400 || e.status > 599) abort();
        char *j = sp_srv_error_json(&e);
        free(j);
    }
    return 0;
}
