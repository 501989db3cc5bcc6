/*
 * fuzz_serve_request.c - `k25 serve`'s request parser (harness/serve_api.c:
 * k25_serve_parse + the context-limit check k25_serve_check_len), the code
 * every HTTP body reaches, called without a socket.  The first byte picks
 * the endpoint (odd: /v1/chat/completions, even: /v1/completions), the rest
 * is the body.  A bad body must give an HTTP status in 400..599 with a
 * message and an OpenAI error object; a good one a request with a non-empty
 * prompt of vocabulary ids.  Seeds: tests/fuzz/seeds/serve/ (first byte 'c'
 * or 'h').
 */
#include "fuzz_util.h"
#include "serve_int.h"

static struct k25_serve g_s; /* the parser reads model_name, vocab, cfg and the engine's limits */

static void setup(void)
{
    struct k25_error err;
    k25_config_init(&g_s.cfg);
    g_s.cfg.max_model_len = 4096; /* a limit the fuzzer can reach within -max_len */
    snprintf(g_s.model_name, sizeof(g_s.model_name), "tiny");
    if (k25_model_load(&g_s.cfg, &g_s.model, &err) != K25_OK ||
        k25_engine_create(&g_s.cfg, g_s.model, &g_s.eng, &err) != K25_OK) {
        fprintf(stderr, "fuzz_serve_request: %s\n", err.msg);
        abort(); /* the harness itself failed: not a finding */
    }
    g_s.vocab = k25_model_get_shape(g_s.model)->vocab_size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_s.eng)
        setup();
    if (size == 0)
        return 0;
    bool chat = data[0] & 1;
    struct sreq r = {0};
    struct k25_serve_bad b = {0};
    if (k25_serve_parse(&g_s, (const char *)data + 1, size - 1, chat, &r, &b) == 0 &&
        k25_serve_check_len(&g_s, &r, chat, &b) == 0) {
        if (r.n_ids < 1 || r.max_tokens < 0 || r.n_stop > SERVE_MAX_STOP)
            abort();
        for (int i = 0; i < r.n_ids; i++)
            if (r.ids[i] < 0 || r.ids[i] >= g_s.vocab)
                abort();
        if (!(r.temperature >= 0 && r.temperature <= 100) || !(r.top_p > 0 && r.top_p <= 1))
            abort();
    } else {
        if (b.status < 400 || b.status > 599 || !b.msg[0])
            abort();
        json_t *e = k25_serve_error_json(b.status, b.param[0] ? b.param : NULL, b.msg);
        if (!e)
            abort();
        json_decref(e);
    }
    k25_serve_req_clear(&r);
    return 0;
}
