//! Issue 21's abort: a small request whose schema or grammar is a long chain (of `$ref`s, of
//! `anyOf`s, of rules, of aliases, of terminals) overflowed the compiler thread's stack, and a
//! stack overflow aborts the process. Now every shape is either refused by name with its limit
//! or compiled on the compiler's own stack (`limits::COMPILE_STACK_BYTES`).
//!
//! The proof that the limits fit the stack: every shape at its limit compiles on an eighth of
//! the real stack, and then decodes (masks and tokens) on this test's ordinary 2 MiB thread, as
//! the server's decode thread does. Above the limit, the error names the limit. A seeded fuzz of
//! mixed shapes and depths runs the same checks. An overflow would abort this test binary, so
//! the test fails rather than passes whatever the assertion.

use std::sync::OnceLock;

use gauge_grammar::keywords::MAX_SCHEMA_NODES;
use gauge_grammar::limits::{COMPILE_STACK_BYTES, MAX_GRAMMAR_RULES};
use gauge_grammar::{ConstraintRequest, ConstraintSpec, GrammarError, GrammarState, GrammarVocab};
use serde_json::{json, Map, Value};

const EOS: u32 = 256;
/// The stack the at-the-limit compiles get: an eighth of the real one.
const SMALL_STACK: usize = COMPILE_STACK_BYTES / 8;

fn byte_vocab() -> &'static GrammarVocab {
    static V: OnceLock<GrammarVocab> = OnceLock::new();
    V.get_or_init(|| {
        let mut words: Vec<Vec<u8>> = (0..256u32).map(|b| vec![b as u8]).collect();
        words.push(b"\xFF<eos>".to_vec());
        GrammarVocab::from_token_bytes(&words, &[EOS]).expect("byte vocabulary")
    })
}

fn compile(spec: ConstraintSpec, stack: usize) -> Result<GrammarState, GrammarError> {
    GrammarState::compile_on_stack(
        &ConstraintRequest::new(spec, "grammar"),
        byte_vocab(),
        stack,
    )
}

/// Decode `text` through the state on this (2 MiB) thread: every byte allowed in turn, and the
/// end after it when `text` is a whole output (it ends in `$`, which is not decoded).
fn decodes(mut st: GrammarState, text: &str) {
    let (body, whole) = match text.strip_suffix('$') {
        Some(b) => (b, true),
        None => (text, false),
    };
    for &b in body.as_bytes() {
        assert!(st.is_allowed(b as u32), "byte {:?} refused", b as char);
        st.consume(b as u32).expect("allowed byte");
    }
    assert!(!whole || st.is_allowed(EOS), "cannot end after {body:?}");
}

fn too_large(r: Result<GrammarState, GrammarError>, limit: usize) {
    match r {
        Err(GrammarError::TooLarge {
            limit: l, ref what, ..
        }) => {
            assert_eq!(l, limit, "{what}");
            let msg = r.unwrap_err().to_string();
            assert!(msg.contains(&limit.to_string()), "{msg}");
        }
        Err(e) => panic!("expected the size limit {limit}, got {e}"),
        Ok(_) => panic!("expected the size limit {limit}, compiled"),
    }
}

/// `n` definitions chained by `$ref` through a property: `{"a": {"a": ... 7}}`.
fn ref_chain(n: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": format!("#/$defs/d{}", i + 1)}}, "required": ["a"]}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

/// `n` definitions chained by `$ref` inside `anyOf`: each is an integer or the next.
fn any_of_chain(n: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        defs.insert(
            format!("d{i}"),
            json!({"anyOf": [{"type": "string", "const": format!("s{i}")}, {"$ref": format!("#/$defs/d{}", i + 1)}]}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

/// Arrays nested `n` deep, as a program (not a JSON text, which serde_json caps at 128) builds.
fn nested_items(n: usize) -> Value {
    let mut s = json!({"type": "integer"});
    for _ in 0..n {
        // Not `json!` with `s` inside, which would serialize `s` recursively.
        let mut o = json!({"type": "array", "minItems": 1, "maxItems": 1});
        o["items"] = s;
        s = o;
    }
    s
}

/// GBNF `r0 ::= "x" r1 | "y"` ... `n` rules.
fn gbnf_chain(n: usize) -> String {
    let mut g = String::from("root ::= r0\n");
    for i in 0..n - 1 {
        g.push_str(&format!("r{i} ::= \"x\" r{} | \"y\"\n", i + 1));
    }
    g.push_str(&format!("r{} ::= \"z\"\n", n - 1));
    g
}

/// GBNF `root ::= a0`, `a0 ::= a1`, ... `n` rules.
fn gbnf_aliases(n: usize) -> String {
    let mut g = String::from("root ::= a0\n");
    for i in 0..n - 1 {
        g.push_str(&format!("a{i} ::= a{}\n", i + 1));
    }
    g.push_str(&format!("a{} ::= \"z\"\n", n - 1));
    g
}

/// Lark rules `r0: "x" r1 | "y"` ... `n` definitions.
fn lark_chain(n: usize) -> String {
    let mut g = String::from("start: r0\n");
    for i in 0..n - 2 {
        g.push_str(&format!("r{i}: \"x\" r{} | \"y\"\n", i + 1));
    }
    g.push_str(&format!("r{}: \"z\"\n", n - 2));
    g
}

/// Lark terminals `T0: T1`, ... (a chain the lexer expands into one nested regex).
fn lark_terminals(n: usize) -> String {
    let mut g = String::from("start: T0\n");
    for i in 0..n - 2 {
        g.push_str(&format!("T{i}: \"x\" T{} | \"y\"\n", i + 1));
    }
    g.push_str(&format!("T{}: \"z\"\n", n - 2));
    g
}

fn nested_parens(depth: usize) -> String {
    format!("root ::= {}\"z\"{}\n", "(".repeat(depth), ")".repeat(depth))
}

#[test]
fn schemas_at_the_limit_compile_on_an_eighth_of_the_stack_and_decode() {
    // Subschemas per level: the definition and its `$ref` (plus the `const` branch for anyOf,
    // plus the root for all). The property chain takes the most stack per subschema measured.
    let st = compile(
        ConstraintSpec::JsonSchema(ref_chain(MAX_SCHEMA_NODES / 2 - 1)),
        SMALL_STACK,
    )
    .expect("$ref chain");
    decodes(st, r#"{"a":{"a":{"a":"#);
    let st = compile(
        ConstraintSpec::JsonSchema(any_of_chain(MAX_SCHEMA_NODES / 3 - 1)),
        SMALL_STACK,
    )
    .expect("anyOf chain");
    // 3,333 open alternatives after `"` exceed llguidance's Earley row limit (2,000 items): the
    // mask then fails, as a resource limit, and only the end is allowed. Never an overflow.
    let mut st = st;
    assert!(st.is_allowed(b'"' as u32));
    let refused = st.consume(b'"' as u32).expect_err("row limit");
    assert!(refused.contains("max is 2000"), "{refused}");
    let (deep, st) = on_big_stack(|| {
        let deep = nested_items(MAX_SCHEMA_NODES - 1);
        let st = compile(ConstraintSpec::JsonSchema(deep.clone()), SMALL_STACK);
        (deep, st)
    });
    decodes(st.expect("nesting"), "[[[[[");
    on_big_stack(move || drop(deep));
}

/// serde_json clones and drops a `Value` recursively: a program-built 10,000-deep one needs
/// a big stack for that (a JSON text is refused by serde_json beyond 128 levels).
fn on_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn schemas_above_the_limit_are_refused_by_name() {
    too_large(
        compile(
            ConstraintSpec::JsonSchema(ref_chain(MAX_SCHEMA_NODES)),
            SMALL_STACK,
        ),
        MAX_SCHEMA_NODES,
    );
    on_big_stack(|| {
        too_large(
            compile(
                ConstraintSpec::JsonSchema(nested_items(MAX_SCHEMA_NODES)),
                SMALL_STACK,
            ),
            MAX_SCHEMA_NODES,
        )
    });
}

#[test]
fn grammars_at_the_limit_compile_on_an_eighth_of_the_stack_and_decode() {
    // GBNF's translation adds two definitions (`start`, and `root` as a rule).
    let n = MAX_GRAMMAR_RULES - 2;
    decodes(
        compile(ConstraintSpec::Gbnf(gbnf_chain(n)), SMALL_STACK).expect("GBNF chain"),
        "xxxxy$",
    );
    decodes(
        compile(ConstraintSpec::Gbnf(gbnf_aliases(n)), SMALL_STACK).expect("GBNF aliases"),
        "z$",
    );
    decodes(
        compile(
            ConstraintSpec::Lark(lark_chain(MAX_GRAMMAR_RULES)),
            SMALL_STACK,
        )
        .expect("Lark chain"),
        "xxxy$",
    );
    decodes(
        compile(ConstraintSpec::Gbnf(nested_parens(20)), SMALL_STACK).expect("parentheses"),
        "z$",
    );
}

#[test]
fn lark_terminal_chains_at_the_limit_compile_or_are_refused_in_plain_words() {
    // llguidance refuses terminals that refer to each other this deeply by its own limits (the
    // lexer's regex size); it must say so, and never overflow.
    match compile(
        ConstraintSpec::Lark(lark_terminals(MAX_GRAMMAR_RULES)),
        SMALL_STACK,
    ) {
        Ok(st) => decodes(st, "xxy$"),
        Err(GrammarError::Compile { message, .. }) => {
            assert!(!message.contains('\n'), "one line: {message}")
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn grammars_above_the_limit_are_refused_by_name() {
    let n = MAX_GRAMMAR_RULES + 2;
    too_large(
        compile(ConstraintSpec::Gbnf(gbnf_chain(n)), SMALL_STACK),
        MAX_GRAMMAR_RULES,
    );
    too_large(
        compile(ConstraintSpec::Gbnf(gbnf_aliases(n)), SMALL_STACK),
        MAX_GRAMMAR_RULES,
    );
    too_large(
        compile(ConstraintSpec::Lark(lark_chain(n)), SMALL_STACK),
        MAX_GRAMMAR_RULES,
    );
    too_large(
        compile(ConstraintSpec::Lark(lark_terminals(n)), SMALL_STACK),
        MAX_GRAMMAR_RULES,
    );
    // Parentheses: llguidance's Lark reader refuses more than 30 levels, GBNF's more than 256,
    // each in its own words.
    for depth in [40, 300, 5_000] {
        let lark = format!("start: {}\"z\"{}\n", "(".repeat(depth), ")".repeat(depth));
        for spec in [
            ConstraintSpec::Lark(lark),
            ConstraintSpec::Gbnf(nested_parens(depth)),
        ] {
            match compile(spec, SMALL_STACK) {
                Err(GrammarError::Compile { message, .. }) => {
                    assert!(message.contains("deep"), "{message}")
                }
                other => panic!("depth {depth}: {other:?}"),
            }
        }
    }
}

#[test]
fn regexes_nested_deeply_are_refused_not_overflowed() {
    for depth in [100, 1_000, 20_000] {
        let rx = format!("{}a{}", "(".repeat(depth), ")".repeat(depth));
        match compile(ConstraintSpec::Regex(rx.clone()), SMALL_STACK) {
            Ok(st) => decodes(st, "a$"),
            Err(GrammarError::Compile { .. }) => {}
            Err(e) => panic!("depth {depth}: {e}"),
        }
        let schema = json!({"type": "string", "pattern": format!("^{rx}$")});
        match compile(ConstraintSpec::JsonSchema(schema), SMALL_STACK) {
            Ok(st) => decodes(st, "\"a\"$"),
            Err(GrammarError::Compile { .. }) => {}
            Err(e) => panic!("pattern depth {depth}: {e}"),
        }
    }
}

/// A small seeded generator (SplitMix64), so a failure names its seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random schema mixing the recursive shapes: `$ref` chains, `anyOf`, `allOf`, nested arrays
/// and objects, up to `budget` subschemas.
fn random_schema(rng: &mut Rng, budget: usize) -> Value {
    let n = 1 + rng.below(budget);
    let mut defs = Map::new();
    for i in 0..n {
        let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
        let s = match rng.below(5) {
            0 => json!({"type": "object", "properties": {"a": next}}),
            1 => json!({"anyOf": [{"type": "null"}, next]}),
            2 => json!({"allOf": [next]}),
            3 => json!({"type": "array", "items": next, "maxItems": 2}),
            _ => next,
        };
        defs.insert(format!("d{i}"), s);
    }
    defs.insert(format!("d{n}"), json!({"type": "boolean"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

/// A random GBNF mixing sequences, alternatives, aliases, groups and repetitions.
fn random_gbnf(rng: &mut Rng, budget: usize) -> String {
    let n = 2 + rng.below(budget);
    let mut g = String::from("root ::= r0\n");
    for i in 0..n - 1 {
        let next = format!("r{}", i + 1);
        let body = match rng.below(5) {
            0 => format!("\"a\" {next}"),
            1 => format!("{next} | \"b\""),
            2 => next,
            3 => format!("({next} \"c\")?"),
            _ => format!("[d-f] {next}*"),
        };
        g.push_str(&format!("r{i} ::= {body}\n"));
    }
    g.push_str(&format!("r{} ::= \"z\"\n", n - 1));
    g
}

#[test]
fn fuzzed_depths_compile_or_are_refused_never_overflow() {
    for seed in 0..12u64 {
        let mut rng = Rng(seed);
        // A third of the cases above the limit, the rest below it.
        let schema_budget = if seed % 3 == 0 {
            MAX_SCHEMA_NODES * 2
        } else {
            MAX_SCHEMA_NODES / 4
        };
        let schema = random_schema(&mut rng, schema_budget);
        match compile(ConstraintSpec::JsonSchema(schema), SMALL_STACK) {
            Ok(mut st) => assert!(st.is_accepting() || !st.allowed().is_zero(), "seed {seed}"),
            Err(GrammarError::TooLarge { .. } | GrammarError::Compile { .. }) => {}
            Err(e) => panic!("seed {seed}: {e}"),
        }
        let rule_budget = if seed % 3 == 0 {
            MAX_GRAMMAR_RULES * 2
        } else {
            MAX_GRAMMAR_RULES - 4
        };
        let g = random_gbnf(&mut rng, rule_budget);
        match compile(ConstraintSpec::Gbnf(g), SMALL_STACK) {
            Ok(mut st) => assert!(!st.allowed().is_zero(), "seed {seed}"),
            Err(GrammarError::TooLarge { .. } | GrammarError::Compile { .. }) => {}
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}
