//! llama.cpp's per-model sampling defaults (`general.sampling.*` in a GGUF, issue 21): applied
//! where the user did not set a field, in `gauge serve` (and `/props`, `/explain`), `gauge
//! generate`, `gauge chain` and `gauge explain`, with their source shown.
//!
//! The models are the default model's GGUF copied with the keys added, written here: a GGUF is a
//! header, key/value pairs, tensor infos, then the tensor data at an aligned offset (tensor
//! offsets are relative to it), so adding pairs means re-padding the header to the alignment and
//! copying the data unchanged. Every expected number below is the value written into the file,
//! never one read back from gauge.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use gauge_engine::{Model, ModelOptions};
use gauge_server::{RunningServer, ServerConfig};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Writing a GGUF with extra keys

/// A GGUF value to add (the GGUF type ids are the spec's).
#[derive(Clone, Debug)]
enum Kv {
    I32(i32),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(&'static str),
    /// An array of UINT8: llama.cpp keeps no text for arrays, so such a key is invisible.
    ArrU8(Vec<u8>),
}

const GGUF_UINT8: u32 = 0;
const GGUF_UINT32: u32 = 4;
const GGUF_INT32: u32 = 5;
const GGUF_FLOAT32: u32 = 6;
const GGUF_BOOL: u32 = 7;
const GGUF_STRING: u32 = 8;
const GGUF_ARRAY: u32 = 9;
const GGUF_FLOAT64: u32 = 12;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_kv(out: &mut Vec<u8>, key: &str, v: &Kv) {
    put_str(out, key);
    match v {
        Kv::I32(x) => {
            out.extend_from_slice(&GGUF_INT32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Kv::F32(x) => {
            out.extend_from_slice(&GGUF_FLOAT32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Kv::F64(x) => {
            out.extend_from_slice(&GGUF_FLOAT64.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Kv::Bool(b) => {
            out.extend_from_slice(&GGUF_BOOL.to_le_bytes());
            out.push(u8::from(*b));
        }
        Kv::Str(s) => {
            out.extend_from_slice(&GGUF_STRING.to_le_bytes());
            put_str(out, s);
        }
        Kv::ArrU8(a) => {
            out.extend_from_slice(&GGUF_ARRAY.to_le_bytes());
            out.extend_from_slice(&GGUF_UINT8.to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            out.extend_from_slice(a);
        }
    }
}

/// A cursor over the source file.
struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Rd<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8_lossy(self.take(n)).into_owned()
    }
    /// Skip one value of GGUF type `ty`.
    fn skip(&mut self, ty: u32) {
        match ty {
            0 | 1 | 7 => self.pos += 1,
            2 | 3 => self.pos += 2,
            4..=6 => self.pos += 4,
            10..=12 => self.pos += 8,
            8 => {
                let n = self.u64() as usize;
                self.pos += n;
            }
            9 => {
                let et = self.u32();
                let n = self.u64();
                for _ in 0..n {
                    self.skip(et);
                }
            }
            t => panic!("unknown GGUF type {t}"),
        }
    }
}

/// Copy the GGUF `src` to `dst` with `add`'s keys (replacing any of the same name).
fn write_gguf(src: &Path, dst: &Path, add: &[(&str, Kv)]) {
    let b = std::fs::read(src).expect("read the source GGUF");
    let mut r = Rd { b: &b, pos: 0 };
    assert_eq!(r.take(4), b"GGUF", "{} is not a GGUF", src.display());
    let version = r.u32();
    assert!(version >= 2, "GGUF v{version}");
    let n_tensors = r.u64();
    let n_kv = r.u64();
    let mut kvs = Vec::new();
    let mut kept = 0u64;
    let mut alignment = 32u64;
    for _ in 0..n_kv {
        let start = r.pos;
        let key = r.string();
        let ty = r.u32();
        let vstart = r.pos;
        r.skip(ty);
        if key == "general.alignment" && ty == GGUF_UINT32 {
            alignment = u64::from(u32::from_le_bytes(
                b[vstart..vstart + 4].try_into().unwrap(),
            ));
        }
        if !add.iter().any(|(k, _)| *k == key) {
            kvs.extend_from_slice(&b[start..r.pos]);
            kept += 1;
        }
    }
    let infos_start = r.pos;
    for _ in 0..n_tensors {
        let _name = r.string();
        let n_dims = r.u32();
        r.pos += 8 * n_dims as usize + 4 + 8;
    }
    let infos = &b[infos_start..r.pos];
    let align = |x: u64| x.div_ceil(alignment) * alignment;
    let data_start = align(r.pos as u64) as usize;

    let mut out = Vec::with_capacity(b.len() + 4096);
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&n_tensors.to_le_bytes());
    out.extend_from_slice(&(kept + add.len() as u64).to_le_bytes());
    out.extend_from_slice(&kvs);
    for (k, v) in add {
        put_kv(&mut out, k, v);
    }
    out.extend_from_slice(infos);
    out.resize(align(out.len() as u64) as usize, 0);
    out.extend_from_slice(&b[data_start..]);
    let tmp = dst.with_extension("tmp");
    std::fs::write(&tmp, &out).expect("write the GGUF");
    std::fs::rename(&tmp, dst).expect("rename the GGUF");
}

/// The default model's file (pulled on first use).
fn base_model() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        gauge_engine::resolve_model(gauge_engine::DEFAULT_MODEL).expect("the default model")
    })
    .clone()
}

fn model_with(name: &str, add: &[(&str, Kv)]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("model_defaults");
    std::fs::create_dir_all(&dir).unwrap();
    let dst = dir.join(format!("{name}.gguf"));
    write_gguf(&base_model(), &dst, add);
    dst
}

// The values written into the files: the expectations below use these constants.
const TOP_K: i32 = 7;
const TEMP: f32 = 0.3;
const PENALTY: f32 = 1.3;
const LAST_N: i32 = 16;

/// Well-typed keys, as a converter writes them.
fn defaults_model() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        model_with(
            "defaults",
            &[
                ("general.sampling.top_k", Kv::I32(TOP_K)),
                ("general.sampling.temp", Kv::F32(TEMP)),
                ("general.sampling.penalty_repeat", Kv::F32(PENALTY)),
                ("general.sampling.penalty_last_n", Kv::I32(LAST_N)),
            ],
        )
    })
}

/// Keys of other types: llama.cpp reads a number from their text, or ignores them.
fn odd_model() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        model_with(
            "odd",
            &[
                // a string holding a number: read as the number
                ("general.sampling.top_k", Kv::Str("12")),
                // a double for a float key: its "%f" text, "0.500000"
                ("general.sampling.top_p", Kv::F64(0.5)),
                // a float for an integer key: strtol reads "3.900000" as 3
                ("general.sampling.penalty_last_n", Kv::F32(3.9)),
                // a boolean: "true" is no number, ignored
                ("general.sampling.mirostat", Kv::Bool(true)),
                // an array: llama.cpp keeps no text for it, so it is not there
                ("general.sampling.min_p", Kv::ArrU8(vec![1, 2])),
                // names with llama.cpp's aliases and case; an unknown one is dropped
                ("general.sampling.sequence", Kv::Str("Top-K;bogus;temp")),
            ],
        )
    })
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn load(p: &Path) -> Model {
    Model::load(
        p,
        ModelOptions {
            n_ctx: 256,
            n_threads: 1,
            ..Default::default()
        },
    )
    .expect("load the model")
}

// ---------------------------------------------------------------------------------------------
// A small HTTP client

fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut rest = &raw[split + 4..];
    let mut bytes = Vec::new();
    if head.contains("transfer-encoding: chunked") {
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16)
                .unwrap();
            rest = &rest[eol + 2..];
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&rest[..n]);
            rest = &rest[n + 2..];
        }
    } else {
        bytes = rest.to_vec();
    }
    let text = String::from_utf8_lossy(&bytes);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

fn config(model: &Path) -> ServerConfig {
    ServerConfig {
        model: path_str(model).into(),
        port: 0,
        threads: 1,
        ctx_size: 512,
        parallel: 1,
        max_tokens: 64,
        ..ServerConfig::default()
    }
}

fn server(
    cell: &'static OnceLock<RunningServer>,
    cfg: impl FnOnce() -> ServerConfig,
) -> SocketAddr {
    cell.get_or_init(|| RunningServer::start(cfg()).expect("the server starts"))
        .addr()
}

/// A server of `defaults_model()` without sampling flags.
fn defaults_server() -> SocketAddr {
    static S: OnceLock<RunningServer> = OnceLock::new();
    server(&S, || config(defaults_model()))
}

fn f(v: &Value) -> f32 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as f32
}

// ---------------------------------------------------------------------------------------------
// The engine reads the keys as llama.cpp does

#[test]
fn the_models_keys_are_read_as_llama_cpp_reads_them() {
    let base = load(&base_model());
    assert!(
        base.sampling_defaults().is_empty(),
        "the default model carries no sampling keys: {:?}",
        base.sampling_defaults()
    );

    let m = load(defaults_model());
    let d = m.sampling_defaults();
    assert_eq!(d.get("top_k").unwrap().value, json!(TOP_K));
    assert_eq!(f(&d.get("temperature").unwrap().value), TEMP);
    assert_eq!(f(&d.get("repeat_penalty").unwrap().value), PENALTY);
    assert_eq!(d.get("repeat_last_n").unwrap().value, json!(LAST_N));
    // llama.cpp's text of an f32 key: "%f".
    assert_eq!(d.get("temperature").unwrap().gguf, format!("{:.6}", TEMP));
    assert_eq!(d.get("temperature").unwrap().key, "general.sampling.temp");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);

    let odd = load(odd_model());
    let d = odd.sampling_defaults();
    assert_eq!(d.get("top_k").unwrap().value, json!(12));
    assert_eq!(f(&d.get("top_p").unwrap().value), 0.5);
    assert_eq!(d.get("top_p").unwrap().gguf, "0.500000");
    assert_eq!(d.get("repeat_last_n").unwrap().value, json!(3));
    assert!(d.get("mirostat").is_none(), "a boolean is no number");
    assert!(
        d.get("min_p").is_none(),
        "an array is invisible to llama.cpp"
    );
    assert_eq!(
        d.get("samplers").unwrap().value,
        json!(["top_k", "temperature"])
    );
    let w = d.warnings.join("\n");
    assert!(
        w.contains("general.sampling.mirostat") && w.contains("\"true\""),
        "{w}"
    );
    assert!(w.contains("\"bogus\""), "{w}");
    assert_eq!(d.warnings.len(), 2, "{w}");
}

// ---------------------------------------------------------------------------------------------
// gauge serve

#[test]
fn props_shows_the_models_defaults_and_where_they_came_from() {
    let (status, p) = http(defaults_server(), "GET", "/props", None);
    assert_eq!(status, 200, "{p}");
    let params = &p["default_generation_settings"]["params"];
    assert_eq!(params["top_k"], json!(TOP_K), "{params}");
    assert_eq!(f(&params["temperature"]), TEMP);
    assert_eq!(f(&params["repeat_penalty"]), PENALTY);
    assert_eq!(params["repeat_last_n"], json!(LAST_N));
    // A field the model does not set keeps llama.cpp's default.
    assert_eq!(f(&params["top_p"]), 0.95);

    let uses = p["gauge"]["model_sampling_defaults"].as_array().unwrap();
    let top_k = uses.iter().find(|u| u["field"] == "top_k").unwrap();
    assert_eq!(top_k["key"], "general.sampling.top_k");
    assert_eq!(top_k["gguf"], TOP_K.to_string());
    assert_eq!(top_k["applied"], true);
    assert_eq!(uses.len(), 4, "{uses:?}");
    let notes = p["gauge"]["notes"].to_string();
    assert!(
        notes.contains("general.sampling.penalty_repeat")
            && notes.contains("ctrl θ")
            && notes.contains("gauge calibrate"),
        "{notes}"
    );
}

#[test]
fn a_request_without_the_fields_samples_with_the_models_defaults() {
    let addr = defaults_server();
    let ask = |extra: Value| {
        let mut body = json!({"prompt": "Once upon a time", "n_predict": 12, "seed": 7,
                              "echo_chain": true, "return_tokens": true});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, r) = http(addr, "POST", "/completion", Some(&body));
        assert_eq!(status, 200, "{r}");
        r
    };
    let plain = ask(json!({}));
    let params = &plain["gauge"]["params"];
    assert_eq!(params["top_k"], json!(TOP_K), "{params}");
    assert_eq!(f(&params["temperature"]), TEMP);
    assert_eq!(f(&params["repeat_penalty"]), PENALTY);
    assert_eq!(params["repeat_last_n"], json!(LAST_N));
    assert!(
        plain["gauge"]["chain"]
            .as_str()
            .unwrap()
            .contains("-> penalties"),
        "the model's penalty is in the chain: {}",
        plain["gauge"]["chain"]
    );

    // A request's own field wins; the rest of the model's defaults still apply.
    let over = ask(json!({"top_k": 40}));
    assert_eq!(over["gauge"]["params"]["top_k"], json!(40));
    assert_eq!(f(&over["gauge"]["params"]["temperature"]), TEMP);
    // So does an alias (`temp`), and HF's `do_sample: false` (greedy).
    let alias = ask(json!({"temp": 0.9}));
    assert_eq!(f(&alias["gauge"]["params"]["temperature"]), 0.9);
    let greedy = ask(json!({"do_sample": false}));
    assert_eq!(f(&greedy["gauge"]["params"]["temperature"]), 0.0);
    // A preset fixes every setting: no model default applies under it.
    let preset = ask(json!({"preset": "llama-cpp-default"}));
    assert_eq!(preset["gauge"]["params"]["top_k"], json!(40));
    // A normalized-mode request does not get the model's ctrl θ.
    let normalized = ask(json!({"repeat_penalty_mode": "normalized"}));
    assert_eq!(f(&normalized["gauge"]["params"]["repeat_penalty"]), 1.0);

    // The defaults are what the tokens were sampled with: the plain model asked for the same
    // values explicitly samples the same tokens.
    static PLAIN: OnceLock<RunningServer> = OnceLock::new();
    let base = server(&PLAIN, || config(&base_model()));
    let body = json!({"prompt": "Once upon a time", "n_predict": 12, "seed": 7,
                      "return_tokens": true, "top_k": TOP_K, "temperature": TEMP, "repeat_penalty": PENALTY,
                      "repeat_last_n": LAST_N});
    let (status, explicit) = http(base, "POST", "/completion", Some(&body));
    assert_eq!(status, 200, "{explicit}");
    assert_eq!(plain["content"], explicit["content"]);
    assert_eq!(plain["tokens"], explicit["tokens"]);
    // And without them, the plain model's default chain differs (sanity of the comparison).
    let (_, p) = http(base, "GET", "/props", None);
    assert_eq!(
        p["default_generation_settings"]["params"]["top_k"],
        json!(40)
    );
}

#[test]
fn the_explain_route_starts_from_the_models_defaults() {
    let body = json!({"prompt": "Hello", "n_predict": 1, "seed": 1});
    let (status, r) = http(defaults_server(), "POST", "/explain", Some(&body));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["params"]["top_k"], json!(TOP_K), "{}", r["params"]);
    assert_eq!(f(&r["params"]["temperature"]), TEMP);
}

#[test]
fn a_serve_flag_overrides_the_models_default_and_a_request_overrides_the_flag() {
    static S: OnceLock<RunningServer> = OnceLock::new();
    let addr = server(&S, || ServerConfig {
        sampling: json!({"top_k": 3}).as_object().unwrap().clone(),
        ..config(defaults_model())
    });
    let (_, p) = http(addr, "GET", "/props", None);
    let params = &p["default_generation_settings"]["params"];
    assert_eq!(params["top_k"], json!(3));
    assert_eq!(
        f(&params["temperature"]),
        TEMP,
        "the model's other defaults apply"
    );
    let uses = p["gauge"]["model_sampling_defaults"].as_array().unwrap();
    let top_k = uses.iter().find(|u| u["field"] == "top_k").unwrap();
    assert_eq!(top_k["applied"], false);
    assert_eq!(top_k["set_by"], "a gauge serve flag");

    let body = json!({"prompt": "Hi", "n_predict": 1, "echo_chain": true, "top_k": 5});
    let (status, r) = http(addr, "POST", "/completion", Some(&body));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["gauge"]["params"]["top_k"], json!(5));
    let body = json!({"prompt": "Hi", "n_predict": 1, "echo_chain": true});
    let (_, r) = http(addr, "POST", "/completion", Some(&body));
    assert_eq!(r["gauge"]["params"]["top_k"], json!(3));
}

#[test]
fn serve_takes_sampling_flags_and_checks_them_at_startup() {
    // A flag out of range is refused before any request, naming the field.
    let err = RunningServer::start(ServerConfig {
        sampling: json!({"top_p": 2.0}).as_object().unwrap().clone(),
        ..config(defaults_model())
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("top_p"), "{err}");
    let o = gauge(&[
        "serve",
        "-m",
        path_str(defaults_model()),
        "--port",
        "0",
        "--top-p",
        "2",
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("top_p"), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------------------------
// The command line

#[test]
fn the_chain_print_shows_each_default_and_its_source() {
    let m = path_str(defaults_model());
    let o = gauge(&["chain", "--model", m]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(&format!("top_k = {TOP_K},")), "{out}");
    assert!(out.contains(&format!("temp = {TEMP:.3}")), "{out}");
    assert!(
        out.contains(&format!("repeat_penalty = {PENALTY:.3}")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "model default: top_k = {TOP_K} (from the model's GGUF: general.sampling.top_k = \"{TOP_K}\")"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "model default: temperature = {TEMP} (from the model's GGUF: general.sampling.temp = \"{TEMP:.6}\")"
        )),
        "{out}"
    );
    assert!(
        out.contains("note: general.sampling.penalty_repeat")
            && out.contains("ctrl θ")
            && out.contains(&format!("gauge calibrate --model {m} --theta {PENALTY}")),
        "{out}"
    );

    // A flag overrides the model's value, and the print says so.
    let o = gauge(&["chain", "--model", m, "--top-k", "3"]);
    let out = stdout(&o);
    assert!(out.contains("top_k = 3,"), "{out}");
    assert!(
        out.contains(&format!(
            "model default: top_k = {TOP_K} not applied: set by the command line"
        )),
        "{out}"
    );
    assert!(out.contains(&format!("temp = {TEMP:.3}")), "{out}");

    // JSON carries the same.
    let o = gauge(&["chain", "--model", m, "--json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let uses = v["model_defaults"]["defaults"].as_array().unwrap();
    assert!(uses
        .iter()
        .any(|u| u["key"] == "general.sampling.top_k" && u["applied"] == true));
    assert!(v["model_defaults"]["notes"][0]
        .as_str()
        .unwrap()
        .contains("gauge calibrate"));

    // Without --model there is no model, and no default.
    let o = gauge(&["chain"]);
    assert!(stdout(&o).contains("top_k = 40,"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("model default"));
}

#[test]
fn the_sequence_key_orders_the_chain_and_bad_keys_are_reported() {
    let o = gauge(&["chain", "--model", path_str(odd_model())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let chain = out
        .lines()
        .find(|l| l.starts_with("sampler chain:"))
        .unwrap();
    assert_eq!(
        chain.trim_end(),
        "sampler chain: logits -> top-k -> temp-ext -> dist"
    );
    assert!(out.contains("top_k = 12,"), "{out}");
    assert!(out.contains("top_p = 0.500"), "{out}");
    assert!(
        out.contains("warning: general.sampling.mirostat = \"true\" is not an integer"),
        "{out}"
    );
    assert!(out.contains("\"bogus\""), "{out}");
    // A --samplers flag wins over the model's sequence; so does --sampler-seq (llama.cpp lets
    // the model's sequence replace --sampler-seq; gauge counts both as set).
    for flag in [["--samplers", "min_p;temperature"], ["--sampler-seq", "mt"]] {
        let o = gauge(&["chain", "--model", path_str(odd_model()), flag[0], flag[1]]);
        assert!(
            stdout(&o).contains("sampler chain: logits -> min-p -> temp-ext -> dist"),
            "{flag:?}: {}",
            stdout(&o)
        );
    }
}

#[test]
fn generate_samples_with_the_models_defaults_and_a_flag_overrides_them() {
    let run = |model: &str, extra: &[&str]| {
        let mut args = vec![
            "generate",
            "-m",
            model,
            "-p",
            "Once upon a time",
            "-n",
            "12",
            "--seed",
            "11",
            "-t",
            "1",
            "-c",
            "256",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = gauge(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        (v, stderr(&o))
    };
    let (with_defaults, err) = run(path_str(defaults_model()), &[]);
    assert!(err.contains(&format!("top_k = {TOP_K},")), "{err}");
    assert!(err.contains("model default: top_k"), "{err}");
    assert!(err.contains("ctrl θ"), "{err}");
    let (top_k, last_n, penalty) = (TOP_K.to_string(), LAST_N.to_string(), PENALTY.to_string());
    let temp = TEMP.to_string();
    let explicit = [
        "--top-k",
        &top_k,
        "--temp",
        &temp,
        "--repeat-penalty",
        &penalty,
        "--repeat-last-n",
        &last_n,
    ];
    let (plain, _) = run(path_str(&base_model()), &explicit);
    assert_eq!(
        with_defaults["tokens"], plain["tokens"],
        "{with_defaults} vs {plain}"
    );

    let (_, err) = run(path_str(defaults_model()), &["--top-k", "1"]);
    assert!(err.contains("top_k = 1,"), "{err}");
    assert!(
        err.contains("not applied: set by the command line"),
        "{err}"
    );
    assert!(err.contains(&format!("temp = {TEMP:.3}")), "{err}");
}

#[test]
fn explain_on_a_model_starts_from_its_defaults() {
    let o = gauge(&[
        "explain",
        "-m",
        path_str(defaults_model()),
        "-p",
        "Hello",
        "-n",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        v["chain"].as_str().unwrap().contains("-> penalties"),
        "{}",
        v["chain"]
    );
    let uses = v["model_defaults"]["defaults"].as_array().unwrap();
    assert_eq!(uses.len(), 4);
    assert!(uses.iter().all(|u| u["applied"] == true));
    let o = gauge(&[
        "explain",
        "-m",
        path_str(defaults_model()),
        "-p",
        "Hello",
        "-n",
        "1",
        "--temp",
        "0",
    ]);
    let out = stdout(&o);
    assert!(
        out.contains("model default: temperature = 0.3 not applied: set by the command line"),
        "{out}"
    );
}
