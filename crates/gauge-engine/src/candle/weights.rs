//! A GGUF's weights for candle: as stored (candle's quantized matmuls, which quantize the
//! activations to q8_1 as llama.cpp's CPU kernels do) or dequantized once to a float32 GGUF in the
//! cache, which candle then runs as plain f32 matmuls. Only the float32 path computes the model
//! that llama.cpp F32, HF transformers and vLLM compute on the same weights (docs/results.md,
//! "Three stacks"), so it is the default.
//!
//! Why a file rather than candle's `CANDLE_DEQUANTIZE_ALL`: that switch is an environment variable
//! read once per thread inside candle, so a library cannot set it reliably; and the file lets
//! llama.cpp load the very same float weights for the logits check.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use candle_transformers::models::quantized_llama::ModelWeights;

use crate::error::{EngineError, Result};

/// Which weights candle runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CandleWeights {
    /// The GGUF dequantized to float32 (cached next to the model cache's other conversions).
    #[default]
    Float32,
    /// The GGUF's own types through candle's quantized kernels (q8_1 activations).
    Native,
}

impl CandleWeights {
    /// The name in run records: `float32` or `native`.
    pub fn name(self) -> &'static str {
        match self {
            CandleWeights::Float32 => "float32",
            CandleWeights::Native => "native",
        }
    }
}

pub(crate) fn candle_err(what: &str, path: &Path) -> impl Fn(candle_core::Error) -> EngineError {
    let ctx = format!("{what} {}", path.display());
    move |e| EngineError::Candle(format!("{ctx}: {e}"))
}

fn io_err(what: &str, path: &Path) -> impl Fn(std::io::Error) -> EngineError {
    let ctx = format!("{what} {}", path.display());
    move |e| EngineError::Candle(format!("{ctx}: {e}"))
}

/// Read a GGUF's header (metadata and tensor table).
pub(crate) fn read_content(path: &Path) -> Result<(gguf_file::Content, BufReader<File>)> {
    let f = File::open(path).map_err(io_err("open", path))?;
    let mut r = BufReader::new(f);
    let ct = gguf_file::Content::read(&mut r).map_err(candle_err("read GGUF", path))?;
    Ok((ct, r))
}

/// Refuse a GGUF that candle's `quantized_llama` would misread: it reads the `llama.*` keys
/// only, so any other architecture is another model.
pub(crate) fn check_llama_arch(ct: &gguf_file::Content, path: &Path) -> Result<()> {
    let arch = ct
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if arch != "llama" {
        return Err(EngineError::Candle(format!(
            "{}: general.architecture = {arch:?}; candle's quantized_llama reads llama-architecture \
             GGUFs only (allowed: \"llama\")",
            path.display()
        )));
    }
    Ok(())
}

/// Where the float32 copy of `src` lives: `<cache>/f32-gguf/<stem>-<sha256[:16]>.candle.F32.gguf`
/// (the hash of the source file, so a changed source gets a new copy).
pub fn f32_gguf_path(src: &Path, cache_dir: &Path) -> Result<PathBuf> {
    let sha = crate::registry::sha256_file(src, None)?;
    let stem = src
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    Ok(cache_dir
        .join("f32-gguf")
        .join(format!("{stem}-{}.candle.F32.gguf", &sha[..16])))
}

/// The float32 copy of `src` in `cache_dir`, written on first use (candle's own dequantization of
/// every tensor; metadata kept, `general.file_type` set to 0 = all F32). The write goes to a
/// temporary file renamed into place, so a killed conversion leaves no half file behind.
/// A GGUF whose tensors are all float32 already is returned as it is.
pub fn ensure_f32_gguf(src: &Path, cache_dir: &Path) -> Result<PathBuf> {
    let (ct, mut reader) = read_content(src)?;
    check_llama_arch(&ct, src)?;
    if ct
        .tensor_infos
        .values()
        .all(|i| i.ggml_dtype == GgmlDType::F32)
    {
        return Ok(src.to_path_buf());
    }
    let out = f32_gguf_path(src, cache_dir)?;
    if out.is_file() {
        return Ok(out);
    }
    let cpu = Device::Cpu;
    // Tensors in file order, each dequantized to f32 (already-f32 tensors are kept as they are).
    let mut infos: Vec<(&String, &gguf_file::TensorInfo)> = ct.tensor_infos.iter().collect();
    infos.sort_by_key(|(_, i)| i.offset);
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(infos.len());
    for (name, _) in infos {
        let q = ct
            .tensor(&mut reader, name, &cpu)
            .map_err(candle_err("read tensor of", src))?;
        let q = if q.dtype() == GgmlDType::F32 {
            q
        } else {
            let t = q.dequantize(&cpu).map_err(candle_err("dequantize", src))?;
            QTensor::quantize(&t, GgmlDType::F32).map_err(candle_err("store f32 of", src))?
        };
        tensors.push((name.clone(), q));
    }
    let mut metadata: HashMap<String, gguf_file::Value> = ct.metadata.clone();
    metadata.insert("general.file_type".into(), gguf_file::Value::U32(0));
    // candle's writer aligns to 32 bytes; a source written with another alignment would say so.
    metadata.insert("general.alignment".into(), gguf_file::Value::U32(32));
    let mut keys: Vec<&String> = metadata.keys().collect();
    keys.sort();
    let md: Vec<(&str, &gguf_file::Value)> =
        keys.iter().map(|k| (k.as_str(), &metadata[*k])).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, q)| (n.as_str(), q)).collect();

    let dir = out.parent().expect("f32_gguf_path has a parent");
    std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io_err("create a file in", dir))?;
    {
        let mut w = BufWriter::new(tmp.as_file());
        gguf_file::write(&mut w, &md, &ts).map_err(candle_err("write", &out))?;
        use std::io::Write;
        w.flush().map_err(io_err("write", &out))?;
    }
    // A cache file like the others (tempfile creates it 0600).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))
            .map_err(io_err("chmod", tmp.path()))?;
    }
    tmp.persist(&out)
        .map_err(|e| EngineError::Candle(format!("rename into {}: {e}", out.display())))?;
    Ok(out)
}

/// candle's quantized llama on the GGUF at `path` (CPU), with the vocabulary size.
pub(crate) fn load_model(path: &Path) -> Result<(ModelWeights, usize)> {
    let (ct, mut reader) = read_content(path)?;
    check_llama_arch(&ct, path)?;
    let n_vocab = ct
        .tensor_infos
        .get("token_embd.weight")
        .map(|i| i.shape.dims()[0])
        .ok_or_else(|| {
            EngineError::Candle(format!("{}: no tensor token_embd.weight", path.display()))
        })?;
    let model =
        ModelWeights::from_gguf(ct, &mut reader, &Device::Cpu).map_err(candle_err("load", path))?;
    Ok((model, n_vocab))
}
