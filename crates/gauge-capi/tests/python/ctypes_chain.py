"""The ctypes route of docs/c-api.md, without llama-cpp-python.

libllama is opened RTLD_LOCAL (as llama-cpp-python opens it), then reopened RTLD_GLOBAL so that
libgauge.so resolves llama_sampler_init from it; gauge samplers then go into a llama.cpp chain
through c_void_p pointers, as `llama_cpp.llama_sampler_chain_add` takes them.

usage: ctypes_chain.py LIBLLAMA_SO LIBGAUGE_SO
Prints "python-ctypes: N passed, M failed" and exits non-zero on any failure.
"""

import ctypes
import json
import math
import sys
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_float,
    c_int32,
    c_int64,
    c_size_t,
    c_void_p,
)

N_VOCAB = 50


class TokenData(Structure):
    _fields_ = [("id", c_int32), ("logit", c_float), ("p", c_float)]


class TokenDataArray(Structure):
    _fields_ = [
        ("data", POINTER(TokenData)),
        ("size", c_size_t),
        ("selected", c_int64),
        ("sorted", c_bool),
    ]


class ChainParams(Structure):
    _fields_ = [("no_perf", c_bool)]


def load(libllama_path, libgauge_path):
    llama = ctypes.CDLL(libllama_path)
    ctypes.CDLL(libllama_path, mode=ctypes.RTLD_GLOBAL)
    gauge = ctypes.CDLL(libgauge_path)

    llama.llama_sampler_chain_default_params.restype = ChainParams
    llama.llama_sampler_chain_init.argtypes = [ChainParams]
    llama.llama_sampler_chain_init.restype = c_void_p
    llama.llama_sampler_chain_add.argtypes = [c_void_p, c_void_p]
    llama.llama_sampler_chain_get.argtypes = [c_void_p, c_int32]
    llama.llama_sampler_chain_get.restype = c_void_p
    llama.llama_sampler_init_greedy.restype = c_void_p
    llama.llama_sampler_init_top_k.argtypes = [c_int32]
    llama.llama_sampler_init_top_k.restype = c_void_p
    llama.llama_sampler_accept.argtypes = [c_void_p, c_int32]
    llama.llama_sampler_apply.argtypes = [c_void_p, POINTER(TokenDataArray)]
    llama.llama_sampler_free.argtypes = [c_void_p]
    llama.llama_sampler_name.argtypes = [c_void_p]
    llama.llama_sampler_name.restype = c_char_p

    gauge.gauge_sampler_init_penalties.argtypes = [
        c_int32,
        c_int32,
        c_float,
        c_float,
        c_float,
        c_char_p,
    ]
    gauge.gauge_sampler_init_penalties.restype = c_void_p
    gauge.gauge_last_error.restype = c_char_p
    gauge.gauge_sampler_error.argtypes = [c_void_p]
    gauge.gauge_sampler_error.restype = c_char_p
    gauge.gauge_llama_sampler_i_size.restype = c_size_t
    gauge.gauge_request_fields.restype = c_char_p
    gauge.gauge_sampler_init_json.argtypes = [c_char_p, c_int32, c_char_p, c_size_t]
    gauge.gauge_sampler_init_json.restype = c_void_p
    return llama, gauge


#: One value of each JSON type, and the catalog's types that accept it ("number" takes integers).
SAMPLES = [
    (True, {"bool"}),
    (7, {"integer", "number"}),
    (0.5, {"number"}),
    ("x", {"string"}),
    ([], {"array"}),
    ({}, {"object"}),
]


def wrong_types_are_refused_by_name(gauge, check):
    """Every name of the table gauge_request_fields() lists, sent to gauge_sampler_init_json with
    a value of a type the table says it does not take: NULL, and the message names it."""
    catalog = json.loads(gauge.gauge_request_fields())
    n = 0
    for field in catalog["sampling"]:
        names = [field["name"]] + [a["name"] for a in field["aliases"]]
        for name in names:
            for value, types in SAMPLES:
                if types & set(field["json"]):
                    continue
                err = ctypes.create_string_buffer(512)
                body = json.dumps({name: value}).encode()
                smpl = gauge.gauge_sampler_init_json(body, N_VOCAB, err, len(err))
                check(
                    not smpl and f"`{name}`".encode() in err.value,
                    f"{body!r}: {err.value!r}",
                )
                n += 1
    check(n > 100, f"only {n} wrong-typed fields sent")


def logits(shift):
    return [math.sin(i * 1.7) * 4.0 + 3.0 + shift for i in range(N_VOCAB)]


def run_chain(llama, stages, row, seen):
    chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
    for s in stages:
        llama.llama_sampler_chain_add(chain, s)
    for t in seen:
        llama.llama_sampler_accept(chain, t)
    buf = (TokenData * len(row))(*[TokenData(i, z, 0.0) for i, z in enumerate(row)])
    arr = TokenDataArray(buf, len(row), -1, False)
    llama.llama_sampler_apply(chain, ctypes.byref(arr))
    token = arr.data[arr.selected].id if arr.selected >= 0 else -1
    return chain, token


def normalized_argmax(row, seen, theta):
    m = max(row)
    lse = m + math.log(sum(math.exp(z - m) for z in row))
    scores = [(z - lse) * (theta if i in seen else 1.0) for i, z in enumerate(row)]
    return max(range(len(row)), key=lambda i: scores[i])


def main(libllama_path, libgauge_path):
    llama, gauge = load(libllama_path, libgauge_path)
    results = []

    def check(ok, what):
        results.append(ok)
        if not ok:
            print(f"FAILED: {what}", file=sys.stderr)

    check(
        gauge.gauge_llama_sampler_i_size() == 12 * ctypes.sizeof(c_void_p),
        "llama_sampler_i size",
    )

    theta = 3.0
    seen = [max(range(N_VOCAB), key=lambda i: logits(0.0)[i])]  # the top token has been seen
    want = normalized_argmax(logits(0.0), seen, theta)
    check(want != seen[0], "the penalty should move the choice in this case")
    for shift in (5.0, -5.0):
        pen = gauge.gauge_sampler_init_penalties(N_VOCAB, -1, theta, 0.0, 0.0, b"normalized")
        check(bool(pen), f"constructor: {gauge.gauge_last_error()}")
        chain, token = run_chain(llama, [pen, llama.llama_sampler_init_greedy()], logits(shift), seen)
        check(token == want, f"normalized at shift {shift}: token {token}, want {want}")
        check(llama.llama_sampler_name(pen) == b"gauge-penalties-normalized", "name")
        check(gauge.gauge_sampler_error(pen) is None, "no error on the full row")
        llama.llama_sampler_free(chain)

    # A top-k before the normalized penalty: skipped and reported.
    pen = gauge.gauge_sampler_init_penalties(N_VOCAB, 64, theta, 0.0, 0.0, b"normalized")
    chain, token = run_chain(
        llama,
        [llama.llama_sampler_init_top_k(5), pen, llama.llama_sampler_init_greedy()],
        logits(0.0),
        seen,
    )
    err = gauge.gauge_sampler_error(llama.llama_sampler_chain_get(chain, 1)) or b""
    check(b"needs all 50 candidates" in err, f"truncated: {err!r}")
    check(token == seen[0], "truncated: the skipped penalty changed the choice")
    llama.llama_sampler_free(chain)

    check(
        not gauge.gauge_sampler_init_penalties(N_VOCAB, 64, 1.3, 0.0, 0.0, b"sign"),
        "bad mode accepted",
    )
    check(
        b"mode" in (gauge.gauge_last_error() or b""),
        "bad mode: message names the field",
    )

    wrong_types_are_refused_by_name(gauge, check)

    failed = results.count(False)
    print(f"python-ctypes: {len(results) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
