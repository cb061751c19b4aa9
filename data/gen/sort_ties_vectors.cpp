// Generator of data/sort-ties-vectors.json: exact output orders of libstdc++ 12's std::sort and
// std::partial_sort, and of llama.cpp's samplers (libllama, public API only), on inputs with many
// tied keys. gauge's ports must reproduce these orders (array order is observable through dist).
//
// Build (g++ 12 / libstdc++, x86-64), against the libllama that llama-cpp-sys-2 0.1.161 builds
// (CMake RelWithDebInfo; the orders do not depend on the optimisation level):
//   B=<llama-cpp-sys-2 out dir>/build; S=<llama-cpp-sys-2 src>/llama.cpp
//   g++ -std=c++17 -O2 -I$S/include -I$S/ggml/include sort_ties_vectors.cpp \
//       $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \
//       -fopenmp -lpthread -ldl -o gen && ./gen > sort-ties-vectors.json
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

static uint64_t g_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64() { // splitmix64
    uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rnd(int n) { return (int) (next_u64() % (uint64_t) n); }

static void print_floats(const std::vector<float> & v) {
    printf("[");
    for (size_t i = 0; i < v.size(); i++) {
        if (i) printf(",");
        if (std::isnan(v[i])) printf("\"nan\"");
        else if (std::isinf(v[i])) printf(v[i] > 0 ? "\"inf\"" : "\"-inf\"");
        else printf("%.9g", v[i]);
    }
    printf("]");
}
static void print_ints(const std::vector<int> & v) {
    printf("[");
    for (size_t i = 0; i < v.size(); i++) printf(i ? ",%d" : "%d", v[i]);
    printf("]");
}

struct item { int key; int idx; };

// --- raw libstdc++ ----------------------------------------------------------------------------
static bool first_sort = true;
static void emit_sort(const char * name, const std::vector<int> & keys, long middle /* -1 = std::sort */) {
    std::vector<item> v;
    for (size_t i = 0; i < keys.size(); i++) v.push_back({keys[i], (int) i});
    auto less = [](const item & a, const item & b) { return a.key < b.key; };
    if (middle < 0) std::sort(v.begin(), v.end(), less);
    else std::partial_sort(v.begin(), v.begin() + middle, v.end(), less);
    std::vector<int> perm;
    for (auto & it : v) perm.push_back(it.idx);
    printf("%s\n    {\"name\": \"%s\", \"middle\": %ld, \"keys\": ", first_sort ? "" : ",", name, middle);
    print_ints(keys);
    printf(", \"perm\": ");
    print_ints(perm);
    printf("}");
    first_sort = false;
}

// McIlroy's "killer adversary" against std::sort, to force the depth-limit heapsort fallback.
static std::vector<int> g_val; static int g_gas, g_nsolid, g_cand;
static std::vector<int> adversary(int n) {
    g_gas = n; g_nsolid = 0; g_cand = 0;
    g_val.assign(n, g_gas);
    std::vector<int> ptr(n);
    for (int i = 0; i < n; i++) ptr[i] = i;
    std::sort(ptr.begin(), ptr.end(), [](int x, int y) {
        if (g_val[x] == g_gas && g_val[y] == g_gas) {
            if (x == g_cand) g_val[x] = g_nsolid++; else g_val[y] = g_nsolid++;
        }
        if (g_val[x] == g_gas) g_cand = x; else if (g_val[y] == g_gas) g_cand = y;
        return g_val[x] < g_val[y];
    });
    return g_val;
}

// --- llama.cpp samplers -------------------------------------------------------------------------
struct stage { std::string json; llama_sampler * s; };

static bool first_case = true;
static void emit_case(const char * name, const std::vector<float> & logits, std::vector<stage> stages, uint32_t dist_seed) {
    std::vector<llama_token_data> cur;
    for (size_t i = 0; i < logits.size(); i++) cur.push_back({(llama_token) i, logits[i], 0.0f});
    llama_token_data_array arr = { cur.data(), cur.size(), -1, false };
    for (auto & st : stages) { llama_sampler_apply(st.s, &arr); llama_sampler_free(st.s); }
    auto * d = llama_sampler_init_dist(dist_seed);
    llama_sampler_apply(d, &arr);
    llama_sampler_free(d);

    printf("%s\n    {\"name\": \"%s\", \"pipeline\": [", first_case ? "" : ",", name);
    for (size_t i = 0; i < stages.size(); i++) printf("%s%s", i ? ", " : "", stages[i].json.c_str());
    printf("], \"dist_seed\": %u, \"logits\": ", dist_seed);
    print_floats(logits);
    std::vector<int> ids; std::vector<float> p;
    for (size_t i = 0; i < arr.size; i++) { ids.push_back(arr.data[i].id); p.push_back(arr.data[i].p); }
    printf(",\n     \"out\": {\"size\": %zu, \"sorted\": %s, \"selected\": %lld, \"ids\": ", arr.size,
           arr.sorted ? "true" : "false", (long long) arr.selected);
    print_ints(ids);
    printf(", \"p\": ");
    print_floats(p);
    printf("}}");
    first_case = false;
}

static std::vector<float> coarse(int n) { // 9 levels in [-2, 2]: heavy ties inside few buckets
    std::vector<float> v(n);
    for (auto & x : v) x = (rnd(9) - 4) * 0.5f;
    return v;
}
static std::vector<float> wide(int n) { // 41 levels in [-15, 15]: ties, and saturated edge buckets
    std::vector<float> v(n);
    for (auto & x : v) x = (rnd(41) - 20) * 0.75f;
    return v;
}
static std::vector<float> with_inf(std::vector<float> v, int n_neg, int n_pos) {
    for (int i = 0; i < n_neg; i++) v[rnd((int) v.size())] = -INFINITY;
    for (int i = 0; i < n_pos; i++) v[rnd((int) v.size())] = INFINITY;
    return v;
}

#define TOPK(k) stage{ "{\"sampler\": \"top_k\", \"k\": " #k "}", llama_sampler_init_top_k(k) }
#define TOPP(p, m) stage{ "{\"sampler\": \"top_p\", \"p\": " #p ", \"min_keep\": " #m "}", llama_sampler_init_top_p(p##f, m) }
#define MINP(p, m) stage{ "{\"sampler\": \"min_p\", \"p\": " #p ", \"min_keep\": " #m "}", llama_sampler_init_min_p(p##f, m) }
#define TYP(p, m) stage{ "{\"sampler\": \"typical\", \"p\": " #p ", \"min_keep\": " #m "}", llama_sampler_init_typical(p##f, m) }
#define TEMPEXT(t, d, e) stage{ "{\"sampler\": \"temp_ext\", \"t\": " #t ", \"delta\": " #d ", \"exponent\": " #e "}", llama_sampler_init_temp_ext(t##f, d##f, e##f) }

int main() {
    printf("{\n  \"source\": \"data/gen/sort_ties_vectors.cpp: g++ 12.2 / libstdc++ 12, libllama from llama-cpp-sys-2 0.1.161 (llama-sampler.cpp identical in length and line numbers to SPEC's 0c1e570)\",\n");
    printf("  \"std_sort\": [");
    {
        std::vector<int> sizes = {17, 40, 100, 257, 1000};
        for (int n : sizes) {
            std::vector<int> k(n);
            for (auto & x : k) x = rnd(5);
            char nm[64]; snprintf(nm, sizeof nm, "sort_n%d_5keys", n);
            emit_sort(nm, k, -1);
        }
        std::vector<int> k(1500);
        for (auto & x : k) x = rnd(3);
        emit_sort("sort_n1500_3keys", k, -1);
        auto adv = adversary(1000);
        for (auto & x : adv) x /= 3; // keep the adversarial shape, add ties
        emit_sort("sort_n1000_adversary_ties", adv, -1);
        std::vector<int> organ(600);
        for (int i = 0; i < 600; i++) organ[i] = (i < 300 ? i : 599 - i) / 4;
        emit_sort("sort_n600_organ_pipe_ties", organ, -1);
    }
    printf("\n  ],\n  \"std_partial_sort\": [");
    first_sort = true;
    {
        struct { int n, m, nk; } cs[] = { {300, 40, 6}, {300, 129, 6}, {17, 17, 3}, {1000, 1, 4}, {1000, 128, 10}, {64, 0, 4}, {5, 3, 2} };
        for (auto & c : cs) {
            std::vector<int> k(c.n);
            for (auto & x : k) x = rnd(c.nk);
            char nm[64]; snprintf(nm, sizeof nm, "partial_n%d_m%d_%dkeys", c.n, c.m, c.nk);
            emit_sort(nm, k, c.m);
        }
    }
    printf("\n  ],\n  \"samplers\": [");
    emit_case("top_k40_heap_coarse", coarse(1000), {TOPK(40)}, 42);
    emit_case("top_k128_heap_wide", wide(1000), {TOPK(128)}, 42);
    emit_case("top_k129_bucket_coarse", coarse(1000), {TOPK(129)}, 42);
    emit_case("top_k700_bucket_wide", wide(2000), {TOPK(700)}, 42);
    emit_case("top_k1500_bucket_full_wide", wide(1500), {TOPK(1500)}, 42);
    emit_case("top_k200_bucket_drops_plus_inf", with_inf(coarse(1000), 5, 2), {TOPK(200)}, 42);
    emit_case("top_k50_heap_keeps_plus_inf", with_inf(coarse(1000), 5, 1), {TOPK(50)}, 42);
    emit_case("typical_n100_coarse", coarse(100), {TYP(0.5, 1)}, 42);
    emit_case("typical_n1200_wide", wide(1200), {TYP(0.9, 1)}, 42);
    emit_case("typical_n300_coarse_min_keep", coarse(300), {TYP(0.2, 50)}, 42);
    emit_case("top_p_lazy256_coarse", coarse(2000), {TOPP(0.05, 1)}, 42);
    emit_case("top_p_lazy_resort_coarse", coarse(2000), {TOPP(0.95, 1)}, 42);
    emit_case("top_p_inplace_n500_coarse", coarse(500), {TOPP(0.9, 1)}, 42);
    emit_case("top_p_lazy_min_keep_wide", wide(2000), {TOPP(0.1, 300)}, 42);
    emit_case("min_p_sorted_fallback_coarse", coarse(1500), {MINP(0.5, 700)}, 42);
    emit_case("min_p_fast_path_coarse", coarse(1500), {MINP(0.05, 1)}, 42);
    emit_case("min_p_over_one_coarse", coarse(1500), {MINP(1.5, 1)}, 42);
    emit_case("temp_ext_dynamic_coarse", coarse(1000), {TEMPEXT(0.8, 0.5, 1.0)}, 42);
    emit_case("default_chain_wide", wide(5000), {TOPK(40), TOPP(0.95, 1), MINP(0.05, 1), TEMPEXT(0.8, 0.0, 1.0)}, 42);
    emit_case("wide_chain_k300", wide(5000), {TOPK(300), TYP(0.95, 1), TOPP(0.9, 1), MINP(0.02, 1), TEMPEXT(0.8, 0.5, 1.0)}, 7);
    printf("\n  ]\n}\n");
    return 0;
}
