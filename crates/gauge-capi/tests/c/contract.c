// gauge samplers inside llama.cpp chains on synthetic arrays (no model): the candidate-array
// contract, the truncated-array rule of the normalized penalty, bad input, and every hook
// (name, accept, apply, reset, clone, free). Built and run by tests/contract.rs, under valgrind
// there, so a leak or an invalid access fails the test.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gauge.h"
#include "llama.h"

#define N_VOCAB 1000

static int n_checks = 0;
static int n_failed = 0;

#define CHECK(cond, ...)                                        \
    do {                                                        \
        n_checks++;                                             \
        if (!(cond)) {                                          \
            n_failed++;                                         \
            fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                       \
            fprintf(stderr, "\n");                              \
        }                                                       \
    } while (0)

// Deterministic logits spread over [-8, 12): most positive, some negative, as real models.
static float logit_of(int i, int step) {
    unsigned x = (unsigned)(i * 2654435761u + (unsigned)step * 40503u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (float)(x % 20000u) / 1000.0f - 8.0f;
}

static void fill(llama_token_data *buf, llama_token_data_array *arr, int step) {
    for (int i = 0; i < N_VOCAB; i++) {
        buf[i].id = i;
        buf[i].logit = logit_of(i, step);
        buf[i].p = 0.0f;
    }
    arr->data = buf;
    arr->size = N_VOCAB;
    arr->selected = -1;
    arr->sorted = false;
}

static struct llama_sampler *greedy_chain(struct llama_sampler *first) {
    struct llama_sampler *c = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(c, first);
    llama_sampler_chain_add(c, llama_sampler_init_greedy());
    return c;
}

static int contains(const char *s, const char *part) { return s != NULL && strstr(s, part) != NULL; }

static void test_bad_input(void) {
    struct llama_sampler *s = gauge_sampler_init_penalties(N_VOCAB, 64, 1.3f, 0, 0, "sign");
    CHECK(s == NULL && contains(gauge_last_error(), "mode") && contains(gauge_last_error(), "sign"),
          "bad mode: %s", gauge_last_error());
    s = gauge_sampler_init_penalties(N_VOCAB, 64, 1.3f, 0, 0, NULL);
    CHECK(s == NULL && contains(gauge_last_error(), "mode"), "NULL mode: %s", gauge_last_error());
    s = gauge_sampler_init_penalties(0, 64, 1.3f, 0, 0, "ctrl");
    CHECK(s == NULL && contains(gauge_last_error(), "n_vocab"), "n_vocab 0: %s", gauge_last_error());
    s = gauge_sampler_init_penalties(N_VOCAB, -2, 1.3f, 0, 0, "ctrl");
    CHECK(s == NULL && contains(gauge_last_error(), "repeat_last_n"), "last_n -2: %s",
          gauge_last_error());
    s = gauge_sampler_init_penalties(N_VOCAB, 64, 0.0f, 0, 0, "normalized");
    CHECK(s == NULL && contains(gauge_last_error(), "repeat_penalty"), "repeat 0: %s",
          gauge_last_error());
    s = gauge_sampler_init_penalties(N_VOCAB, 64, 1.3f, NAN, 0, "ctrl");
    CHECK(s == NULL && contains(gauge_last_error(), "frequency_penalty"), "freq NaN: %s",
          gauge_last_error());

    char err[256] = {0};
    s = gauge_sampler_init_json("{\"top_k\": \"many\"}", N_VOCAB, err, sizeof err);
    CHECK(s == NULL && contains(err, "top_k"), "top_k string: %s", err);
    s = gauge_sampler_init_json("{\"temperature\": 0.8,", N_VOCAB, err, sizeof err);
    CHECK(s == NULL && contains(err, "JSON"), "malformed: %s", err);
    s = gauge_sampler_init_json("{\"logit_bias\": [[5000, 1.0]]}", N_VOCAB, err, sizeof err);
    CHECK(s == NULL && contains(err, "5000"), "bias id out of range: %s", err);
    s = gauge_sampler_init_json(NULL, N_VOCAB, err, sizeof err);
    CHECK(s == NULL && contains(err, "params_json"), "NULL json: %s", err);
    // A short buffer gets a cut, NUL-terminated message.
    char small[8];
    memset(small, 'x', sizeof small);
    s = gauge_sampler_init_json("[]", N_VOCAB, small, sizeof small);
    CHECK(s == NULL && strlen(small) == 7, "short err buffer: '%.8s'", small);
    s = gauge_sampler_init_json("[]", N_VOCAB, NULL, 0);
    CHECK(s == NULL && gauge_last_error() != NULL, "NULL err buffer");
}

// ctrl is llama.cpp's penalties bit for bit, through chains, accepts, clone and reset.
static void test_ctrl_matches_llama(void) {
    struct llama_sampler *g = greedy_chain(gauge_sampler_init_penalties(N_VOCAB, 16, 1.3f, 0.2f, 0.1f, "ctrl"));
    struct llama_sampler *l = greedy_chain(llama_sampler_init_penalties(N_VOCAB, 16, 1.3f, 0.2f, 0.1f));
    CHECK(strcmp(llama_sampler_name(llama_sampler_chain_get(g, 0)), "gauge-penalties") == 0, "name %s",
          llama_sampler_name(llama_sampler_chain_get(g, 0)));
    static llama_token_data bg[N_VOCAB], bl[N_VOCAB];
    llama_token_data_array ag, al;
    int differ = 0;
    for (int step = 0; step < 40; step++) {
        // accept a spread of tokens, some repeated, so the window and counts matter
        llama_token t = (llama_token)((step * 37) % 50);
        llama_sampler_accept(g, t);
        llama_sampler_accept(l, t);
        fill(bg, &ag, step);
        fill(bl, &al, step);
        llama_sampler_apply(g, &ag);
        llama_sampler_apply(l, &al);
        if (ag.size != al.size || ag.selected != al.selected || ag.sorted != al.sorted) differ++;
        for (size_t i = 0; i < ag.size && i < al.size; i++) {
            if (ag.data[i].id != al.data[i].id ||
                memcmp(&ag.data[i].logit, &al.data[i].logit, sizeof(float)) != 0)
                differ++;
        }
        if (step == 20) {
            struct llama_sampler *gc = llama_sampler_clone(g);
            struct llama_sampler *lc = llama_sampler_clone(l);
            llama_sampler_free(g);
            llama_sampler_free(l);
            g = gc;
            l = lc;
        }
        if (step == 30) {
            llama_sampler_reset(g);
            llama_sampler_reset(l);
        }
    }
    CHECK(differ == 0, "ctrl differs from llama.cpp's penalties in %d places", differ);
    llama_sampler_free(g);
    llama_sampler_free(l);
}

// normalized on the full row: log-softmax (computed here in double), then l*theta for seen tokens.
static void test_normalized_full_row(void) {
    const float theta = 1.5f;
    struct llama_sampler *s = gauge_sampler_init_penalties(N_VOCAB, -1, theta, 0, 0, "normalized");
    CHECK(strcmp(llama_sampler_name(s), "gauge-penalties-normalized") == 0, "name %s", llama_sampler_name(s));
    // -1 = the whole history: token 3, accepted 200 tokens ago, still counts.
    llama_sampler_accept(s, 3);
    for (int i = 0; i < 200; i++) llama_sampler_accept(s, 500 + (i % 7));
    static llama_token_data buf[N_VOCAB];
    llama_token_data_array a;
    fill(buf, &a, 7);
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < N_VOCAB; i++) mx = fmax(mx, buf[i].logit);
    for (int i = 0; i < N_VOCAB; i++) sum += exp(buf[i].logit - mx);
    const double lse = mx + log(sum);
    float before[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) before[i] = buf[i].logit;
    llama_sampler_apply(s, &a);
    double worst = 0.0;
    for (int i = 0; i < N_VOCAB; i++) {
        const int id = a.data[i].id;
        const int seen = id == 3 || (id >= 500 && id < 507);
        const double l = before[id] - lse;
        const double want = seen ? l * theta : l;
        worst = fmax(worst, fabs(a.data[i].logit - want));
    }
    CHECK(a.size == N_VOCAB && !a.sorted && a.selected == -1, "contract: size %zu sorted %d selected %lld",
          a.size, a.sorted, (long long)a.selected);
    CHECK(worst < 1e-5, "normalized differs from log-softmax * theta by %g", worst);
    CHECK(gauge_sampler_error(s) == NULL, "unexpected error: %s", gauge_sampler_error(s));
    llama_sampler_free(s);

    // llama.cpp's own -1 is "off": its chain prints ?penalties.
    struct llama_sampler *l = llama_sampler_init_penalties(N_VOCAB, -1, theta, 0, 0);
    CHECK(strcmp(llama_sampler_name(l), "?penalties") == 0, "llama.cpp -1: %s", llama_sampler_name(l));
    llama_sampler_free(l);
}

// A stage before the normalized penalty cut the array: the penalty skips itself, says so, and
// the chain still selects (the same token as without the penalty).
static void test_truncated_array(void) {
    struct llama_sampler *c = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(c, llama_sampler_init_top_k(10));
    llama_sampler_chain_add(c, gauge_sampler_init_penalties(N_VOCAB, 64, 1.5f, 0.5f, 0, "normalized"));
    llama_sampler_chain_add(c, llama_sampler_init_greedy());
    struct llama_sampler *ref = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(ref, llama_sampler_init_top_k(10));
    llama_sampler_chain_add(ref, llama_sampler_init_greedy());

    static llama_token_data buf[N_VOCAB], rbuf[N_VOCAB];
    llama_token_data_array a, r;
    fill(buf, &a, 3);
    fill(rbuf, &r, 3);
    // make the top token "seen", so an applied penalty would change the choice
    llama_sampler_apply(ref, &r);
    const llama_token top = r.data[r.selected].id;
    llama_sampler_accept(c, top);
    llama_sampler_apply(c, &a);
    struct llama_sampler *g = llama_sampler_chain_get(c, 1);
    CHECK(contains(gauge_sampler_error(g), "needs all 1000 candidates but the array has 10"),
          "truncated: error %s", gauge_sampler_error(g) ? gauge_sampler_error(g) : "(null)");
    CHECK(a.size == 10 && a.selected >= 0 && a.data[a.selected].id == top,
          "truncated: size %zu, selected token %d, want %d", a.size,
          a.selected >= 0 ? a.data[a.selected].id : -1, top);
    int same = 1;
    for (size_t i = 0; i < a.size; i++)
        if (a.data[i].id != r.data[i].id || a.data[i].logit != r.data[i].logit) same = 0;
    CHECK(same, "truncated: the skipped stage changed the candidates");
    // reset clears the record; the full row then gets the penalty and the choice moves
    llama_sampler_reset(c);
    CHECK(gauge_sampler_error(g) == NULL, "reset keeps the error");
    struct llama_sampler *full = greedy_chain(gauge_sampler_init_penalties(N_VOCAB, 64, 1.5f, 0.5f, 0, "normalized"));
    llama_sampler_accept(full, top);
    fill(buf, &a, 3);
    llama_sampler_apply(full, &a);
    CHECK(a.data[a.selected].id != top, "full row: the seen top token should lose");
    CHECK(gauge_sampler_error(llama_sampler_chain_get(full, 0)) == NULL, "full row: error set");
    // ctrl needs no full row: no error on the cut array
    struct llama_sampler *cc = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(cc, llama_sampler_init_top_k(10));
    llama_sampler_chain_add(cc, gauge_sampler_init_penalties(N_VOCAB, 64, 1.5f, 0, 0, "ctrl"));
    fill(buf, &a, 3);
    llama_sampler_apply(cc, &a);
    CHECK(gauge_sampler_error(llama_sampler_chain_get(cc, 1)) == NULL, "ctrl on a cut array: error set");
    CHECK(gauge_sampler_error(ref) == NULL, "a llama.cpp sampler is not a gauge sampler");
    llama_sampler_free(cc);
    llama_sampler_free(full);
    llama_sampler_free(ref);
    llama_sampler_free(c);
}

// gauge's whole chain alone: selects, keeps its RNG through clone, refuses NaN rows.
static void test_json_chain(void) {
    char err[256];
    struct llama_sampler *s = gauge_sampler_init_json(
        "{\"temperature\": 0.8, \"seed\": 42, \"top_k\": 20, \"repeat_penalty\": 1.3, "
        "\"repeat_penalty_mode\": \"normalized\", \"repeat_last_n\": -1}",
        N_VOCAB, err, sizeof err);
    CHECK(s != NULL, "json: %s", err);
    if (s == NULL) return;
    CHECK(strcmp(llama_sampler_name(s), "gauge-chain") == 0, "name %s", llama_sampler_name(s));
    static llama_token_data buf[N_VOCAB], cbuf[N_VOCAB];
    llama_token_data_array a, b;
    struct llama_sampler *copy = NULL;
    int differ = 0;
    for (int step = 0; step < 30; step++) {
        fill(buf, &a, step);
        llama_sampler_apply(s, &a);
        CHECK(a.selected >= 0 && (size_t)a.selected < a.size && a.size <= 20, "step %d: selected %lld size %zu",
              step, (long long)a.selected, a.size);
        if (a.selected < 0) break;
        const llama_token t = a.data[a.selected].id;
        llama_sampler_accept(s, t);
        if (copy != NULL) {
            fill(cbuf, &b, step);
            llama_sampler_apply(copy, &b);
            if (b.selected < 0 || b.data[b.selected].id != t) differ++;
            llama_sampler_accept(copy, t);
        }
        if (step == 10) copy = llama_sampler_clone(s);
    }
    CHECK(differ == 0, "clone diverged from the original in %d steps", differ);
    CHECK(gauge_sampler_error(s) == NULL, "unexpected error: %s", gauge_sampler_error(s));

    fill(buf, &a, 99);
    buf[17].logit = NAN;
    llama_sampler_apply(s, &a);
    CHECK(a.selected == -1 && a.size == N_VOCAB && isnan(buf[17].logit) && buf[0].logit == logit_of(0, 99),
          "NaN row: selected %lld, array touched", (long long)a.selected);
    CHECK(contains(gauge_sampler_error(s), "NaN"), "NaN row: error %s",
          gauge_sampler_error(s) ? gauge_sampler_error(s) : "(null)");
    llama_sampler_reset(s);
    CHECK(gauge_sampler_error(s) == NULL, "reset keeps the error");
    llama_sampler_free(copy);
    llama_sampler_free(s);
}

// The table of request fields, as JSON text that lives as long as the library.
static void test_request_fields(void) {
    const char *fields = gauge_request_fields();
    CHECK(contains(fields, "\"sampling\":[") && contains(fields, "\"name\":\"repetition_penalty\""),
          "gauge_request_fields: %.80s", fields ? fields : "(NULL)");
    CHECK(fields == gauge_request_fields(), "gauge_request_fields is one static text");
}

int main(void) {
    CHECK(gauge_llama_sampler_i_size() == sizeof(struct llama_sampler_i),
          "llama_sampler_i: libgauge fills %zu bytes, this llama.h has %zu", gauge_llama_sampler_i_size(),
          sizeof(struct llama_sampler_i));
    test_bad_input();
    test_ctrl_matches_llama();
    test_normalized_full_row();
    test_truncated_array();
    test_json_chain();
    test_request_fields();
    printf("contract: %d passed, %d failed\n", n_checks - n_failed, n_failed);
    return n_failed == 0 ? 0 : 1;
}
