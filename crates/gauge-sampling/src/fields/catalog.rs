//! The table for readers other than the parser: as JSON ([`catalog`], what the Python and C faces
//! hand out) and as Markdown ([`markdown_table`], docs/server.md's field list).

use super::{Field, CONSTRAINT_FIELDS, NO_EFFECT_FIELDS, REFUSED, SAMPLING};
use crate::presets::Preset;
use serde_json::{json, Value};

fn field_json(f: &Field) -> Value {
    json!({
        "name": f.name,
        "aliases": f.aliases.iter().map(|a| json!({"name": a.name, "from": a.from})).collect::<Vec<_>>(),
        "json": f.takes.json.iter().map(|t| t.name()).collect::<Vec<_>>(),
        "takes": f.takes.text,
        "gguf": f.gguf,
        "read_with": f.read_with(),
        "doc": f.doc,
    })
}

/// Every field name gauge knows, as JSON: `sampling` (the rows of [`SAMPLING`]: `name`,
/// `aliases` [{`name`, `from`}], `json` types, `takes`, `gguf`, `read_with`, `doc`), `refused`
/// ({`name`, `from`, `accepted_only_as`, `instead`}), `constraint` and `no_effect` (names).
pub fn catalog() -> Value {
    json!({
        "sampling": SAMPLING.iter().map(field_json).collect::<Vec<_>>(),
        "refused": REFUSED.iter().map(|r| json!({
            "name": r.name,
            "from": r.from,
            "accepted_only_as": r.neutral_text,
            "instead": r.instead,
        })).collect::<Vec<_>>(),
        "constraint": CONSTRAINT_FIELDS,
        "no_effect": NO_EFFECT_FIELDS,
    })
}

fn code(name: &str) -> String {
    format!("`{name}`")
}

/// The sampling fields as a Markdown table, one row per field: docs/server.md holds this text
/// between its `<!-- sampling-fields -->` markers (a test compares them).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| field | other names accepted | takes | a model's default | notes |\n\
         |---|---|---|---|---|\n",
    );
    for f in SAMPLING {
        let aliases: Vec<String> = f
            .aliases
            .iter()
            .map(|a| match a.from {
                "" => code(a.name),
                from => format!("{} ({from})", code(a.name)),
            })
            .collect();
        let mut doc = f.doc.to_string();
        if f.name == "preset" {
            let names: Vec<String> = Preset::ALL.iter().map(|p| code(p.name())).collect();
            doc.push_str(&format!(": {}", names.join(", ")));
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            code(f.name),
            aliases.join(", "),
            f.takes.text.replace('|', "\\|"),
            f.gguf.map(code).unwrap_or_default(),
            doc.replace('|', "\\|"),
        ));
    }
    out
}
