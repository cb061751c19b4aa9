// Decode 3 prompts x 32 tokens on a GGUF model with one sampler setup, print one line of token
// ids per prompt. Built and run by tests/token_identity.rs, which compares setups.
//
// usage: generate MODEL SETUP [THETA]   (THETA: the repeat penalty, default 1.3)
//   greedy                   llama_sampler_init_greedy alone (no penalty)
//   llama-penalties          llama_sampler_init_penalties(n_vocab, 64, 1.3, 0, 0) -> greedy
//   gauge-penalties-ctrl     gauge_sampler_init_penalties(n_vocab, 64, 1.3, 0, 0, "ctrl") -> greedy
//   bias+5-normalized        logit_bias(+5 on every token) -> gauge "normalized" -> greedy
//   bias-5-normalized        the same with -5
//   bias+5-ctrl, bias-5-ctrl the same with gauge "ctrl"
//   gauge-json               gauge_sampler_init_json("{\"temperature\":0.8,\"seed\":42}") alone
//   llama-default            llama.cpp's default chain with seed 42, as common_sampler_init builds it
//
// Every prompt token is accepted into the sampler before decoding, as llama-server does.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gauge.h"
#include "llama.h"

#define N_PREDICT 32

static float THETA = 1.3f;

static const char *PROMPTS[3] = {
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
};

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static struct llama_sampler *need(struct llama_sampler *s, const char *what) {
    if (s == NULL) {
        const char *e = gauge_last_error();
        fprintf(stderr, "%s returned NULL: %s\n", what, e ? e : "(no message)");
        exit(2);
    }
    return s;
}

static struct llama_sampler *gauge_penalties(int32_t n_vocab, const char *mode) {
    return need(gauge_sampler_init_penalties(n_vocab, 64, THETA, 0.0f, 0.0f, mode),
                "gauge_sampler_init_penalties");
}

static struct llama_sampler *chain_new(void) {
    return llama_sampler_chain_init(llama_sampler_chain_default_params());
}

static struct llama_sampler *bias_chain(int32_t n_vocab, float bias, const char *mode) {
    llama_logit_bias *all = malloc(sizeof(llama_logit_bias) * (size_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) {
        all[i].token = i;
        all[i].bias = bias;
    }
    struct llama_sampler *c = chain_new();
    llama_sampler_chain_add(c, llama_sampler_init_logit_bias(n_vocab, n_vocab, all));
    llama_sampler_chain_add(c, gauge_penalties(n_vocab, mode));
    llama_sampler_chain_add(c, llama_sampler_init_greedy());
    free(all);
    return c;
}

// common_sampler_init with default common_params_sampling and seed 42.
static struct llama_sampler *llama_default_chain(const struct llama_vocab *vocab, int32_t n_vocab) {
    struct llama_sampler *c = chain_new();
    int32_t n_suppress = 0;
    const llama_token *suppress = llama_vocab_get_suppress_tokens(vocab, &n_suppress);
    if (n_suppress > 0) {
        llama_logit_bias *b = malloc(sizeof(llama_logit_bias) * (size_t)n_suppress);
        for (int32_t i = 0; i < n_suppress; i++) {
            b[i].token = suppress[i];
            b[i].bias = -INFINITY;
        }
        llama_sampler_chain_add(c, llama_sampler_init_logit_bias(n_vocab, n_suppress, b));
        free(b);
    }
    const char *breakers[4] = {"\n", ":", "\"", "*"};
    llama_sampler_chain_add(c, llama_sampler_init_penalties(n_vocab, 64, 1.0f, 0.0f, 0.0f));
    llama_sampler_chain_add(c, llama_sampler_init_dry(vocab, 0.0f, 1.75f, 2, 64, breakers, 4));
    llama_sampler_chain_add(c, llama_sampler_init_top_n_sigma(-1.0f));
    llama_sampler_chain_add(c, llama_sampler_init_top_k(40));
    llama_sampler_chain_add(c, llama_sampler_init_typical(1.0f, 0));
    llama_sampler_chain_add(c, llama_sampler_init_top_p(0.95f, 0));
    llama_sampler_chain_add(c, llama_sampler_init_min_p(0.05f, 0));
    llama_sampler_chain_add(c, llama_sampler_init_xtc(0.0f, 0.10f, 0, 42));
    llama_sampler_chain_add(c, llama_sampler_init_temp_ext(0.8f, 0.0f, 1.0f));
    llama_sampler_chain_add(c, llama_sampler_init_dist(42));
    return c;
}

static struct llama_sampler *make_sampler(const char *setup, const struct llama_vocab *vocab,
                                          int32_t n_vocab) {
    if (strcmp(setup, "greedy") == 0) return llama_sampler_init_greedy();
    if (strcmp(setup, "llama-penalties") == 0) {
        struct llama_sampler *c = chain_new();
        llama_sampler_chain_add(c, llama_sampler_init_penalties(n_vocab, 64, THETA, 0.0f, 0.0f));
        llama_sampler_chain_add(c, llama_sampler_init_greedy());
        return c;
    }
    if (strcmp(setup, "gauge-penalties-ctrl") == 0) {
        struct llama_sampler *c = chain_new();
        llama_sampler_chain_add(c, gauge_penalties(n_vocab, "ctrl"));
        llama_sampler_chain_add(c, llama_sampler_init_greedy());
        return c;
    }
    if (strcmp(setup, "bias+5-normalized") == 0) return bias_chain(n_vocab, 5.0f, "normalized");
    if (strcmp(setup, "bias-5-normalized") == 0) return bias_chain(n_vocab, -5.0f, "normalized");
    if (strcmp(setup, "bias+5-ctrl") == 0) return bias_chain(n_vocab, 5.0f, "ctrl");
    if (strcmp(setup, "bias-5-ctrl") == 0) return bias_chain(n_vocab, -5.0f, "ctrl");
    if (strcmp(setup, "gauge-json") == 0) {
        char err[256];
        struct llama_sampler *s =
            gauge_sampler_init_json("{\"temperature\":0.8,\"seed\":42}", n_vocab, err, sizeof err);
        if (s == NULL) {
            fprintf(stderr, "gauge_sampler_init_json: %s\n", err);
            exit(2);
        }
        return s;
    }
    if (strcmp(setup, "llama-default") == 0) return llama_default_chain(vocab, n_vocab);
    fprintf(stderr, "unknown setup %s\n", setup);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s MODEL SETUP [THETA]\n", argv[0]);
        return 2;
    }
    if (argc == 4) THETA = strtof(argv[3], NULL);
    llama_log_set(quiet_log, NULL);
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (model == NULL) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (ctx == NULL) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }

    for (int p = 0; p < 3; p++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        llama_token tokens[256];
        const int32_t n = llama_tokenize(vocab, PROMPTS[p], (int32_t)strlen(PROMPTS[p]), tokens,
                                         256, true, false);
        if (n <= 0) {
            fprintf(stderr, "tokenize failed for prompt %d\n", p);
            return 1;
        }
        struct llama_sampler *smpl = make_sampler(argv[2], vocab, n_vocab);
        if (p == 0) fprintf(stderr, "%s: sampler %s\n", argv[2], llama_sampler_name(smpl));
        for (int32_t i = 0; i < n; i++) llama_sampler_accept(smpl, tokens[i]);
        if (llama_decode(ctx, llama_batch_get_one(tokens, n)) != 0) {
            fprintf(stderr, "decode failed\n");
            return 1;
        }
        for (int i = 0; i < N_PREDICT; i++) {
            llama_token t = llama_sampler_sample(smpl, ctx, -1);
            printf(i == 0 ? "%d" : " %d", t);
            if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
                fprintf(stderr, "decode failed\n");
                return 1;
            }
        }
        printf("\n");
        llama_sampler_free(smpl);
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
