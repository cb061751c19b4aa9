//! `--json-schema FILE` and `--grammar FILE`: the output constrained by a grammar (crate
//! gauge-grammar), for `gauge generate` and `gauge chain`.

use anyhow::{Context, Result};
use clap::Args;
use gauge_engine::Model;
use gauge_grammar::{constrain, ConstraintRequest, ConstraintSpec, GrammarStage, GrammarVocab};
use gauge_sampling::{Chain, SamplingParams};
use std::path::PathBuf;

#[derive(Args, Debug, Default, Clone)]
pub struct ConstraintArgs {
    /// Constrain the output to a JSON Schema (a JSON file); the chain gets a `grammar` stage
    /// first.
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    pub json_schema: Option<PathBuf>,
    /// Constrain the output to a grammar file, read as llama.cpp reads one: GBNF (`root ::=
    /// ...`), or Lark in llguidance's dialect when its first line is `%llguidance {}`. A `.lark`
    /// file without that line, or a `.gbnf` file with it, is refused rather than guessed.
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
}

impl ConstraintArgs {
    /// The constraint the flags ask for, if any, read from its file.
    pub fn request(&self) -> Result<Option<ConstraintRequest>> {
        if let Some(path) = &self.json_schema {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--json-schema: reading {}", path.display()))?;
            let schema: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("--json-schema: {} is not JSON", path.display()))?;
            return Ok(Some(ConstraintRequest {
                spec: ConstraintSpec::JsonSchema(schema),
                field: format!("--json-schema {}", path.display()),
                lenient: false,
            }));
        }
        if let Some(path) = &self.grammar {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--grammar: reading {}", path.display()))?;
            let spec = gauge_grammar::grammar_text("grammar", text);
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            match (&spec, ext) {
                (ConstraintSpec::Gbnf(_), "lark") => anyhow::bail!(
                    "--grammar {}: a .lark file is read as GBNF unless its first line is \
                     `%llguidance {{}}` (llama.cpp's marker for a Lark grammar); add that line",
                    path.display()
                ),
                (ConstraintSpec::Lark(_), "gbnf") => anyhow::bail!(
                    "--grammar {}: a .gbnf file starts with `%llguidance`, which marks a Lark \
                     grammar; remove the line or rename the file",
                    path.display()
                ),
                _ => {}
            }
            return Ok(Some(ConstraintRequest {
                spec,
                field: format!("--grammar {}", path.display()),
                lenient: false,
            }));
        }
        Ok(None)
    }
}

/// The model's grammar vocabulary (one pass over its tokens).
pub fn model_vocab(model: &Model) -> Result<GrammarVocab> {
    Ok(GrammarVocab::from_token_bytes(
        &model.grammar_token_bytes(),
        &model.grammar_eos(),
    )?)
}

/// A byte-level stand-in vocabulary of `n_vocab` ids (ids 0..256 are the bytes, the last id
/// ends the output): enough to compile a grammar and show the chain without a model.
pub fn byte_vocab(n_vocab: usize) -> Result<GrammarVocab> {
    anyhow::ensure!(
        n_vocab > 257,
        "--n-vocab {n_vocab}: a grammar needs at least 258 ids without --model (256 bytes and an end token)"
    );
    let mut words: Vec<Vec<u8>> = (0..n_vocab)
        .map(|i| if i < 256 { vec![i as u8] } else { Vec::new() })
        .collect();
    words[n_vocab - 1] = b"\xFF<eos>".to_vec();
    Ok(GrammarVocab::from_token_bytes(
        &words,
        &[(n_vocab - 1) as u32],
    )?)
}

/// `chain` with the constraint's stage in front, when there is one.
pub fn apply(
    chain: Chain,
    req: Option<&ConstraintRequest>,
    vocab: impl FnOnce() -> Result<GrammarVocab>,
    params: &SamplingParams,
) -> Result<Chain> {
    let Some(req) = req else {
        return Ok(chain);
    };
    let vocab = vocab()?;
    let stage = GrammarStage::compile(req, &vocab, params)?;
    Ok(constrain(chain, stage))
}
