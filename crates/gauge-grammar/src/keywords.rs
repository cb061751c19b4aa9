//! Which JSON Schema keywords the grammar enforces, and a walk that finds the others.
//!
//! A schema is a promise about the output. llguidance enforces most of JSON Schema, but some
//! keywords (`not`, `if`/`then`/`else`, `uniqueItems`, `contains`, `propertyNames`, ...) cannot
//! be expressed as a grammar, and a lenient compile would drop them without a word: the output
//! then violates the schema the client sent. So before compiling, [`check_schema`] walks every
//! subschema and names the first keyword the grammar would not enforce, with its path; the
//! request is refused unless it asked to be lenient, and then the dropped keywords are reported.
//!
//! The walk is iterative and counts what it visits, so a hostile schema can neither overflow the
//! stack here nor reach llguidance's recursive compiler larger than [`MAX_SCHEMA_NODES`]
//! subschemas (the depth of that compiler's recursion is at most the number of subschemas).

use serde_json::{Map, Value};

/// How the grammar treats a keyword.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// The grammar allows exactly the outputs the keyword allows.
    Enforced,
    /// Meta-data or an annotation: it does not constrain the output.
    Annotation,
    /// It constrains the output, but no grammar here enforces it (the reason, in plain words).
    Refused(&'static str),
}

/// Every keyword of JSON Schema drafts 4 to 2020-12 and how the grammar treats it. A key that
/// is not a keyword of any draft is ignored, as the specification says validators must.
pub const KEYWORDS: &[(&str, Support)] = &[
    // Core and applicators llguidance compiles into the grammar.
    ("$ref", Support::Enforced),
    ("allOf", Support::Enforced),
    ("anyOf", Support::Enforced),
    // Exact when the branches are provably disjoint; otherwise the compiler refuses it.
    ("oneOf", Support::Enforced),
    ("const", Support::Enforced),
    ("enum", Support::Enforced),
    ("type", Support::Enforced),
    ("items", Support::Enforced),
    ("prefixItems", Support::Enforced),
    ("additionalItems", Support::Enforced),
    ("minItems", Support::Enforced),
    ("maxItems", Support::Enforced),
    ("properties", Support::Enforced),
    ("patternProperties", Support::Enforced),
    ("additionalProperties", Support::Enforced),
    ("required", Support::Enforced),
    // Exact when every listed property is required; otherwise the compiler refuses it.
    ("minProperties", Support::Enforced),
    ("maxProperties", Support::Enforced),
    ("minLength", Support::Enforced),
    ("maxLength", Support::Enforced),
    ("pattern", Support::Enforced),
    // Enforced for the formats in [`FORMATS`]; any other format is refused.
    ("format", Support::Enforced),
    ("minimum", Support::Enforced),
    ("maximum", Support::Enforced),
    ("exclusiveMinimum", Support::Enforced),
    ("exclusiveMaximum", Support::Enforced),
    ("multipleOf", Support::Enforced),
    // Meta-data and annotations.
    ("$schema", Support::Annotation),
    ("$id", Support::Annotation),
    ("id", Support::Annotation),
    ("$anchor", Support::Annotation),
    ("$vocabulary", Support::Annotation),
    ("$comment", Support::Annotation),
    ("$defs", Support::Annotation),
    ("definitions", Support::Annotation),
    ("title", Support::Annotation),
    ("description", Support::Annotation),
    ("default", Support::Annotation),
    ("examples", Support::Annotation),
    ("deprecated", Support::Annotation),
    ("readOnly", Support::Annotation),
    ("writeOnly", Support::Annotation),
    ("contentEncoding", Support::Annotation),
    ("contentMediaType", Support::Annotation),
    ("contentSchema", Support::Annotation),
    // Constraints no grammar here enforces.
    (
        "not",
        Support::Refused("a grammar cannot exclude what a subschema allows"),
    ),
    (
        "if",
        Support::Refused("conditional schemas are not compiled into grammars"),
    ),
    (
        "then",
        Support::Refused("conditional schemas are not compiled into grammars"),
    ),
    (
        "else",
        Support::Refused("conditional schemas are not compiled into grammars"),
    ),
    (
        "uniqueItems",
        Support::Refused("a grammar cannot compare array items with each other"),
    ),
    (
        "contains",
        Support::Refused("a grammar cannot require that some array item matches"),
    ),
    (
        "minContains",
        Support::Refused("a grammar cannot count the items that match `contains`"),
    ),
    (
        "maxContains",
        Support::Refused("a grammar cannot count the items that match `contains`"),
    ),
    (
        "propertyNames",
        Support::Refused("property names are constrained only by `properties`, `patternProperties` and `additionalProperties`"),
    ),
    (
        "dependencies",
        Support::Refused("a grammar cannot make one property depend on another"),
    ),
    (
        "dependentRequired",
        Support::Refused("a grammar cannot make one property depend on another"),
    ),
    (
        "dependentSchemas",
        Support::Refused("a grammar cannot make one property depend on another"),
    ),
    (
        "unevaluatedItems",
        Support::Refused("unevaluated locations are not compiled into grammars"),
    ),
    (
        "unevaluatedProperties",
        Support::Refused("unevaluated locations are not compiled into grammars"),
    ),
    (
        "$dynamicRef",
        Support::Refused("dynamic references are not resolved; use `$ref`"),
    ),
    (
        "$dynamicAnchor",
        Support::Refused("dynamic anchors are not resolved; use `$ref`"),
    ),
    (
        "$recursiveAnchor",
        Support::Refused("recursive anchors are not resolved; use `$ref`"),
    ),
    (
        "$recursiveRef",
        Support::Refused("recursive references are not resolved; use `$ref`"),
    ),
];

/// The `format` values the grammar enforces (llguidance's built-in format regexes).
pub const FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
    "uri",
];

/// The most subschemas a schema may hold (every object or boolean in a schema position, `$defs`
/// included). Real schemas hold tens to a few hundred; the limit bounds the compiler's
/// recursion, whose stack [`crate::limits`] sizes for it.
pub const MAX_SCHEMA_NODES: usize = 10_000;

/// How `keyword` is treated, or `None` when it is not a JSON Schema keyword.
pub fn support(keyword: &str) -> Option<Support> {
    KEYWORDS
        .iter()
        .find(|(k, _)| *k == keyword)
        .map(|&(_, s)| s)
}

/// A keyword in a schema that the grammar does not enforce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unenforced {
    /// Where: a JSON pointer into the schema (`#/properties/tags/uniqueItems`).
    pub path: String,
    /// The keyword (for `format`, `format: "<value>"`).
    pub keyword: String,
    /// Why the grammar cannot enforce it.
    pub why: String,
}

impl std::fmt::Display for Unenforced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` at `{}` is not enforced: {}",
            self.keyword, self.path, self.why
        )
    }
}

/// What [`check_schema`] found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaCheckError {
    /// More subschemas than [`MAX_SCHEMA_NODES`].
    TooLarge { limit: usize },
}

/// JSON pointer escaping of one reference token (RFC 6901).
fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Every keyword in `schema` that the grammar would not enforce, in document order, or an error
/// when the schema holds more than [`MAX_SCHEMA_NODES`] subschemas.
pub fn check_schema(schema: &Value) -> Result<Vec<Unenforced>, SchemaCheckError> {
    // Each visited subschema as (parent, reference token): a path is spelled out only for what
    // is reported, so a deep schema costs time linear in its size.
    let mut visited: Vec<(usize, String)> = Vec::new();
    let mut stack: Vec<(usize, String, &Value)> = vec![(usize::MAX, String::new(), schema)];
    let mut found = Vec::new();
    while let Some((parent, token, node)) = stack.pop() {
        if visited.len() == MAX_SCHEMA_NODES {
            return Err(SchemaCheckError::TooLarge {
                limit: MAX_SCHEMA_NODES,
            });
        }
        let me = visited.len();
        visited.push((parent, token));
        let Some(obj) = node.as_object() else {
            continue;
        };
        for (key, keyword, why) in unenforced_keywords(obj) {
            found.push(Unenforced {
                path: path_of(&visited, me, key),
                keyword,
                why,
            });
        }
        // Children pushed in reverse so that they are visited in document order.
        let mut children = Vec::new();
        for (k, v) in obj {
            subschemas(k, v, &mut children);
        }
        stack.extend(children.into_iter().rev().map(|(t, v)| (me, t, v)));
    }
    Ok(found)
}

/// The JSON pointer of `key` in the subschema `at`.
fn path_of(visited: &[(usize, String)], at: usize, key: &str) -> String {
    let mut tokens = vec![pointer_token(key)];
    let mut i = at;
    while i != usize::MAX {
        let (parent, token) = &visited[i];
        if *parent != usize::MAX {
            tokens.push(token.clone());
        }
        i = *parent;
    }
    tokens.push("#".into());
    tokens.reverse();
    tokens.join("/")
}

/// The keywords of one schema object the grammar would not enforce: (key, as reported, why).
fn unenforced_keywords(obj: &Map<String, Value>) -> Vec<(&str, String, String)> {
    let mut out = Vec::new();
    for (k, v) in obj {
        match support(k) {
            Some(Support::Refused(why)) => out.push((k.as_str(), k.clone(), why.to_string())),
            Some(Support::Enforced) if k == "format" => {
                if let Some(f) = v.as_str().filter(|f| !FORMATS.contains(f)) {
                    out.push((
                        "format",
                        format!("format: {}", serde_json::to_string(f).unwrap_or_default()),
                        format!("the formats enforced are {}", FORMATS.join(", ")),
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// The subschemas under keyword `k` (value `v`), each with its path below the keyword's object.
fn subschemas<'a>(k: &str, v: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    let here = |rest: &str| format!("{}{rest}", pointer_token(k));
    match k {
        // One subschema.
        "additionalProperties"
        | "additionalItems"
        | "not"
        | "if"
        | "then"
        | "else"
        | "contains"
        | "propertyNames"
        | "unevaluatedItems"
        | "unevaluatedProperties"
        | "contentSchema" => out.push((here(""), v)),
        // A subschema, or (drafts 4 to 2019-09) a tuple of them.
        "items" => match v {
            Value::Array(a) => out.extend(
                a.iter()
                    .enumerate()
                    .map(|(i, s)| (here(&format!("/{i}")), s)),
            ),
            _ => out.push((here(""), v)),
        },
        // Arrays of subschemas.
        "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
            if let Some(a) = v.as_array() {
                out.extend(
                    a.iter()
                        .enumerate()
                        .map(|(i, s)| (here(&format!("/{i}")), s)),
                );
            }
        }
        // Maps of subschemas (`dependencies` also holds arrays of names, which are skipped).
        "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas"
        | "dependencies" => {
            if let Some(m) = v.as_object() {
                out.extend(
                    m.iter()
                        .filter(|(_, s)| s.is_object() || s.is_boolean())
                        .map(|(n, s)| (here(&format!("/{}", pointer_token(n))), s)),
                );
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_name_the_keyword_where_it_is() {
        let s = json!({
            "type": "object",
            "properties": {"a/b": {"type": "array", "uniqueItems": true}},
            "$defs": {"x": {"not": {"const": 1}}},
            "anyOf": [true, {"format": "bogus"}]
        });
        let got: Vec<String> = check_schema(&s)
            .unwrap()
            .iter()
            .map(|u| format!("{} {}", u.path, u.keyword))
            .collect();
        assert_eq!(
            got,
            [
                "#/properties/a~1b/uniqueItems uniqueItems",
                "#/$defs/x/not not",
                "#/anyOf/1/format format: \"bogus\"",
            ]
        );
    }

    #[test]
    fn a_deep_schema_is_walked_without_recursion_and_a_huge_one_refused() {
        let mut s = json!({"type": "integer"});
        for _ in 0..5_000 {
            // Not `json!` with `s` inside, which would serialize `s` recursively.
            let mut o = Map::new();
            o.insert("type".into(), json!("array"));
            o.insert("items".into(), s);
            s = Value::Object(o);
        }
        assert_eq!(check_schema(&s).unwrap(), vec![]);
        let wide: Vec<Value> = (0..MAX_SCHEMA_NODES).map(|_| json!(true)).collect();
        assert_eq!(
            check_schema(&json!({ "anyOf": wide })),
            Err(SchemaCheckError::TooLarge {
                limit: MAX_SCHEMA_NODES
            })
        );
        // Dropping the deep Value recursively is serde_json's own business; keep it small.
        std::mem::forget(s);
    }
}
