//! What a penalty breaks in JSON that parses: placeholder or empty required values, strings and
//! arrays closed early, schema validity with `format` checked (constrained A2, issue 14).
//!
//! Under a grammar every output is syntactically JSON, so the penalty's damage has to show in
//! the content. The measures here are computed from an output's parsed value and its schema, for
//! constrained and unconstrained runs alike:
//!
//! * **required placeholders**: a property the schema lists as `required` (at the root and in
//!   nested `properties`, following no `$ref`) whose value is empty (`""`, `[]`, `{}`), `null`,
//!   a placeholder word (`"string"`, `"example"`, `"..."`, `"N/A"`, ...) or its own key name;
//! * **strings**: every string value (object keys excluded): how many are empty or placeholders,
//!   and their mean length in characters (strings closed early are short);
//! * **arrays**: how many are empty, and their mean number of items (arrays closed early).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Counts over one output (added up over outputs by [`Shape::add`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    pub required: u64,
    pub required_placeholder: u64,
    pub strings: u64,
    pub strings_placeholder: u64,
    pub string_chars: u64,
    pub arrays: u64,
    pub arrays_empty: u64,
    pub array_items: u64,
}

/// Words models put where they have nothing to say (compared trimmed, lowercase).
const PLACEHOLDERS: &[&str] = &[
    "",
    "string",
    "str",
    "text",
    "value",
    "example",
    "sample",
    "test",
    "placeholder",
    "xxx",
    "...",
    "…",
    "n/a",
    "na",
    "none",
    "null",
    "tbd",
    "todo",
    "lorem ipsum",
    "foo",
    "bar",
    "abc",
    "<string>",
    "your text here",
    "unknown",
];

fn is_placeholder_str(s: &str, key: Option<&str>) -> bool {
    let t = s.trim().to_lowercase();
    PLACEHOLDERS.contains(&t.as_str()) || key.is_some_and(|k| k.eq_ignore_ascii_case(t.as_str()))
}

fn is_placeholder(v: &Value, key: &str) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => is_placeholder_str(s, Some(key)),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

impl Shape {
    /// The counts of one parsed output against its schema.
    pub fn of(value: &Value, schema: &Value) -> Shape {
        let mut s = Shape::default();
        s.walk_values(value, None);
        s.walk_required(value, schema, 0);
        s
    }

    fn walk_values(&mut self, v: &Value, key: Option<&str>) {
        match v {
            Value::String(x) => {
                self.strings += 1;
                self.string_chars += x.chars().count() as u64;
                if is_placeholder_str(x, key) {
                    self.strings_placeholder += 1;
                }
            }
            Value::Array(a) => {
                self.arrays += 1;
                self.array_items += a.len() as u64;
                if a.is_empty() {
                    self.arrays_empty += 1;
                }
                for x in a {
                    self.walk_values(x, key);
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    self.walk_values(x, Some(k));
                }
            }
            _ => {}
        }
    }

    fn walk_required(&mut self, v: &Value, schema: &Value, depth: usize) {
        let (Some(obj), Some(sch)) = (v.as_object(), schema.as_object()) else {
            return;
        };
        if depth > 16 {
            return;
        }
        if let Some(req) = sch.get("required").and_then(Value::as_array) {
            for k in req.iter().filter_map(Value::as_str) {
                if let Some(x) = obj.get(k) {
                    self.required += 1;
                    if is_placeholder(x, k) {
                        self.required_placeholder += 1;
                    }
                }
            }
        }
        if let Some(props) = sch.get("properties").and_then(Value::as_object) {
            for (k, sub) in props {
                if let Some(x) = obj.get(k) {
                    self.walk_required(x, sub, depth + 1);
                }
            }
        }
    }

    /// Add another output's counts.
    pub fn add(&mut self, o: &Shape) {
        self.required += o.required;
        self.required_placeholder += o.required_placeholder;
        self.strings += o.strings;
        self.strings_placeholder += o.strings_placeholder;
        self.string_chars += o.string_chars;
        self.arrays += o.arrays;
        self.arrays_empty += o.arrays_empty;
        self.array_items += o.array_items;
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Rates of a summed [`Shape`] (`None` where nothing was counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ShapeRates {
    pub required_placeholder_rate: Option<f64>,
    pub string_placeholder_rate: Option<f64>,
    pub mean_string_chars: Option<f64>,
    pub empty_array_rate: Option<f64>,
    pub mean_array_items: Option<f64>,
}

impl From<&Shape> for ShapeRates {
    fn from(s: &Shape) -> Self {
        ShapeRates {
            required_placeholder_rate: ratio(s.required_placeholder, s.required),
            string_placeholder_rate: ratio(s.strings_placeholder, s.strings),
            mean_string_chars: ratio(s.string_chars, s.strings),
            empty_array_rate: ratio(s.arrays_empty, s.arrays),
            mean_array_items: ratio(s.array_items, s.arrays),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_empty_values_and_early_closing_are_counted() {
        let schema = json!({"type": "object", "required": ["name", "tags", "info"], "properties": {
            "info": {"type": "object", "required": ["city"]}}});
        let v = json!({"name": "string", "tags": [], "info": {"city": "Paris"}, "note": ""});
        let s = Shape::of(&v, &schema);
        assert_eq!((s.required, s.required_placeholder), (4, 2));
        assert_eq!(
            (s.strings, s.strings_placeholder, s.string_chars),
            (3, 2, 11)
        );
        assert_eq!((s.arrays, s.arrays_empty, s.array_items), (1, 1, 0));
        let good = json!({"name": "Ada", "tags": ["x", "y"], "info": {"city": "Paris"}});
        let g = Shape::of(&good, &schema);
        assert_eq!(g.required_placeholder, 0);
        assert_eq!(ShapeRates::from(&g).mean_array_items, Some(2.0));
    }
}
