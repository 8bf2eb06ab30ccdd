/* jinja.c — the engine's entry points (jinja.h): lex, parse, bind the context, run. */
#include "jinja.h"

#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

int sp_jinja_render(const char *tmpl, size_t len, const char *name, json_t *ctx, const jinja_limits *lim,
                 char **out, size_t *out_len, sp_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!name) name = "template";
    if (ctx && !json_is_object(ctx)) return sp_err_set(err, "%s: the variables must be a JSON object", name);
    size_t max_out = lim && lim->max_output ? lim->max_output : (size_t)16 << 20;
    jx_arena a = {.cap = lim && lim->max_memory ? lim->max_memory : (size_t)256 << 20};
    jtok *toks;
    jnode *root;
    int ntok, rc = -1;
    jbuf b = {0};
    jx_ctx c = {.a = &a, .name = name, .err = err, .out_cap = max_out,
                .max_steps = lim && lim->max_steps > 0 ? lim->max_steps : 20000000LL};
    if (sp_jx_lex(&a, tmpl, len, name, &toks, &ntok, err) || sp_jx_parse(&a, toks, ntok, name, &root, err)) goto done;
    jscope *vars = sp_jx_alloc(&a, sizeof *vars), *top = sp_jx_alloc(&a, sizeof *top);
    if (!vars || !top || !(vars->vars = sp_jx_dict_new(&a)) || !(top->vars = sp_jx_dict_new(&a))) {
        sp_err_set(err, "%s: out of memory", name);
        goto done;
    }
    top->up = vars;
    c.scope = c.root = top;
    if (ctx) {
        const char *k;
        json_t *v;
        json_object_foreach(ctx, k, v) {
            jv x;
            if (sp_jx_from_json(&c, v, &x, 0) || sp_jx_dict_set(&c, vars->vars, k, strlen(k), x)) goto done;
        }
    }
    if (sp_jx_render_body(&c, root->body, root->nbody, &b)) goto done;
    if (!b.p && sp_jbuf_put(&c, &b, "", 0)) goto done;
    *out = b.p;
    if (out_len) *out_len = b.n;
    b.p = NULL;
    rc = 0;
done:
    free(b.p);
    sp_jx_arena_free(&a);
    return rc;
}

int sp_jinja_render_bytes(const char *tmpl, size_t tmpl_len, const char *ctx_json, size_t ctx_len,
                       char **out, size_t *out_len, sp_err *err) {
    json_t *ctx = NULL;
    *out = NULL;
    if (ctx_len) {
        json_error_t je;
        ctx = json_loadb(ctx_json, ctx_len, 0, &je);
        if (!ctx) return sp_err_set(err, "context: invalid JSON at line %d: %s", je.line, je.text);
    }
    int rc = sp_jinja_render(tmpl, tmpl_len, "template", ctx, NULL, out, out_len, err);
    json_decref(ctx);
    return rc;
}
