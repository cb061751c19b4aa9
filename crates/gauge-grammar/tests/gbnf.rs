//! GBNF through the translator and llguidance: llama.cpp's own grammars (tests/data/gbnf, copied
//! with provenance) translate, compile, and accept and reject the texts they should; each
//! construct on its own; errors name the line, the rule and what is wrong; the request fields
//! read GBNF or Lark by llama.cpp's and vLLM's rules.
//!
//! Acceptance is checked by a real llguidance matcher over a byte-level vocabulary (ids 0..256
//! are the bytes, 256 ends the output): a text matches when every byte is allowed in turn and
//! the end token is allowed after the last one.

use std::sync::OnceLock;

use gauge_grammar::{
    gbnf_to_lark, ConstraintRequest, ConstraintSpec, GrammarError, GrammarState, GrammarVocab,
};
use serde_json::json;

const EOS: u32 = 256;

fn byte_vocab() -> &'static GrammarVocab {
    static V: OnceLock<GrammarVocab> = OnceLock::new();
    V.get_or_init(|| {
        let mut words: Vec<Vec<u8>> = (0..256u32).map(|b| vec![b as u8]).collect();
        words.push(b"\xFF<eos>".to_vec());
        GrammarVocab::from_token_bytes(&words, &[EOS]).expect("byte vocabulary")
    })
}

fn compile(spec: ConstraintSpec) -> Result<GrammarState, GrammarError> {
    let req = ConstraintRequest {
        spec,
        field: "grammar".into(),
        lenient: false,
    };
    GrammarState::compile(&req, byte_vocab())
}

fn gbnf(text: &str) -> GrammarState {
    compile(ConstraintSpec::Gbnf(text.into()))
        .unwrap_or_else(|e| panic!("compiling\n{text}\n-> {e}"))
}

/// Does the whole of `text` match?
fn matches(state: &GrammarState, text: &str) -> bool {
    let mut st = state.clone();
    for &b in text.as_bytes() {
        if !st.is_allowed(b as u32) {
            return false;
        }
        st.consume(b as u32).expect("allowed byte");
    }
    st.is_allowed(EOS)
}

fn check(name: &str, st: &GrammarState, accept: &[&str], reject: &[&str]) {
    for t in accept {
        assert!(matches(st, t), "{name} should accept {t:?}");
    }
    for t in reject {
        assert!(!matches(st, t), "{name} should reject {t:?}");
    }
}

fn data(name: &str) -> String {
    let path = format!("{}/tests/data/gbnf/{name}.gbnf", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn llama_cpp_json_grammar() {
    let st = gbnf(&data("json"));
    check(
        "json.gbnf",
        &st,
        &[
            "{}",
            r#"{"a":1}"#,
            r#"{"k":[1,2.5,-3e10,"x\n",true,null,{}],"u":"\u00e9\"q"}"#,
            r#"{"nested":{"deep":[[],[{}]]},"e":1.5E+3}"#,
            "{\"raw\":\"caf\u{e9} \u{1F600}\"}",
        ],
        &[
            "",
            "[1]",
            r#"{"a":01}"#,
            r#"{"a":1,}"#,
            r#"{'a':1}"#,
            r#"{"a":tru}"#,
            r#"{"a" : 1}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":1"#,
            r#"{"a":1}}"#,
        ],
    );
}

#[test]
fn llama_cpp_json_arr_grammar() {
    let st = gbnf(&data("json_arr"));
    check(
        "json_arr.gbnf",
        &st,
        &["[\n]", "[\n{\"a\": 1}]", "[\n1,\n  \"x\" ,\n{} ]"],
        &["[1]", "[\n1,2]", "[\n1\n"],
    );
}

#[test]
fn llama_cpp_arithmetic_grammar() {
    let st = gbnf(&data("arithmetic"));
    check(
        "arithmetic.gbnf",
        &st,
        &[
            "1+2=3\n",
            "x1 +2=3\n",
            "( a*b )/c= d\n1=1\n",
            "foo_bar-7=x\n",
        ],
        &["1+=3\n", "=3\n", "1+2=3", "1+2\n", "A=1\n", "1++2=3\n"],
    );
}

#[test]
fn llama_cpp_list_grammar() {
    let st = gbnf(&data("list"));
    check(
        "list.gbnf",
        &st,
        &["", "- a\n", "- milk\n- two eggs\n"],
        &["- \n", "-a\n", "- a", "- a\r\n", "- a\u{2028}b\n", "* a\n"],
    );
}

#[test]
fn llama_cpp_chess_grammar() {
    let st = gbnf(&data("chess"));
    check(
        "chess.gbnf",
        &st,
        &[
            "1. e4 e5\n2. Nf3 Nc6\n",
            "1. d4 d5\n2. c4 dxc4\n3. O-O Qxd1+\n10. exd8=Q# O-O-O\n",
        ],
        &[
            "1. e4 e5\n",
            "1. e9 e5\n2. Nf3 Nc6\n",
            "2. e4 e5\n2. Nf3 Nc6\n",
            "1. e4 e5\n0. Nf3 Nc6\n",
            "1. e4  e5\n2. Nf3 Nc6\n",
        ],
    );
}

#[test]
fn llama_cpp_c_grammar() {
    let st = gbnf(&data("c"));
    check(
        "c.gbnf",
        &st,
        &[
            "",
            "int main(){return 0;}",
            "int f(int x){x = x+1;return x;}float g(){while(a<=b){a = a*2;}}",
            "char c(){// note\nif(a!=b){return -a;}else{}}",
            "int m(){/* a * b */}",
        ],
        &[
            "int main(){return 0}",
            "main(){}",
            "int main(){x=1;}",
            "int m(){/* open }",
        ],
    );
}

#[test]
fn llama_cpp_japanese_grammar() {
    let st = gbnf(&data("japanese"));
    check(
        "japanese.gbnf",
        &st,
        &["こんにちは", "こんにちは 世界", "カタカナ、漢字\nひらがな"],
        &["", "hello", "こんにちは  世界", "こんにちは!"],
    );
}

#[test]
fn every_copied_grammar_translates_to_lark_rules() {
    for name in [
        "arithmetic",
        "c",
        "chess",
        "japanese",
        "json",
        "json_arr",
        "list",
    ] {
        let lark = gbnf_to_lark(&data(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(lark.contains("\nstart: g_root\n"), "{name}:\n{lark}");
        assert!(lark.contains("\ng_root: "), "{name}:\n{lark}");
    }
}

#[test]
fn literal_escapes() {
    let st = gbnf(r#"root ::= "\x41\u00e9\U0001F600\t\n\r\\\"\[\]\-" "é""#);
    check(
        "escapes",
        &st,
        &["A\u{e9}\u{1F600}\t\n\r\\\"[]-é"],
        &["A\u{e9}\u{1F600}\t\n\r\\\"[]-", "\\x41"],
    );
    // `\x85` is the codepoint U+0085 (two UTF-8 bytes), as in llama.cpp, not the byte 0x85.
    let st = gbnf(r#"root ::= "\x85""#);
    check("x85", &st, &["\u{85}"], &[]);
    // Control characters and DEL, which Lark's string syntax cannot hold raw.
    let st = gbnf(r#"root ::= "\x00\x1f\x7f""#);
    check("controls", &st, &["\u{0}\u{1f}\u{7f}"], &["\u{0}\u{1f}"]);
}

#[test]
fn character_classes() {
    let st = gbnf(r#"root ::= [a-c0-2_]+ [^a-z\n] [\]\[\-\\"/^]"#);
    check(
        "classes",
        &st,
        &["a0_B]", "cc2 [", "a\u{e9}-", "a/\\", "a//", "a\t^", "a-\""],
        &["d0B]", "aa\n]", "aaa]", "a0B", "a0Bx"],
    );
    // A `-` before `]` is a literal dash (llama.cpp), and a dash first is one too.
    let st = gbnf("root ::= [a-] [-z]");
    check("dashes", &st, &["az", "-z", "a-", "--"], &["b-", "ay"]);
    // A negated class matches any other character, newlines and non-ASCII included.
    let st = gbnf(r#"root ::= [^"]"#);
    check("negated", &st, &["\n", "\u{1F600}", "a"], &["\"", "ab"]);
}

#[test]
fn any_character() {
    let st = gbnf(r#"root ::= . . "x""#);
    check(
        "dot",
        &st,
        &["\n\u{e9}x", "abx", "\u{1F600}\u{0}x"],
        &["ax", "abcx"],
    );
}

#[test]
fn repetitions() {
    let st = gbnf(r#"root ::= "a"{2} "b"{1,} "c"{0,2} "d"{0} ("e" "f")? "g"* "h"+"#);
    check(
        "counts",
        &st,
        &["aabh", "aabbbccefgggh", "aabcchh"],
        &["abh", "aah", "aabccch", "aabdh", "aabeh", "aab"],
    );
    // A repeated literal repeats the whole literal; repetitions stack like llama.cpp's.
    let st = gbnf(r#"root ::= "ab"{1,2} ("x"*)?"#);
    check(
        "literal",
        &st,
        &["ab", "abab", "ababxx"],
        &["abb", "ababab"],
    );
    // An upper bound above llama.cpp's 2000 means no bound, as in llama.cpp.
    let st = gbnf(r#"root ::= "a"{1,5000}"#);
    check("big", &st, &[&"a".repeat(2100)], &[""]);
}

#[test]
fn groups_alternatives_comments_and_line_rules() {
    let text = "# leading comment\n\
                root ::= ( \"x\" # inside a group\n\
                \x20 | \"y\" ) tail |\n\
                \x20 \"z\"   # after the rule\n\
                tail ::= \"!\" |\n";
    let st = gbnf(text);
    check("groups", &st, &["x!", "y", "z"], &["x!!", "z!", ""]);
}

#[test]
fn rule_names_map_to_distinct_lark_rules() {
    let text = "root ::= jp-char dataType data-type 9lives start\n\
                jp-char ::= \"a\"\ndataType ::= \"b\"\ndata-type ::= \"c\"\n9lives ::= \"d\"\nstart ::= \"e\"\n";
    let st = gbnf(text);
    check("names", &st, &["abcde"], &["abcd", "acbde"]);
}

#[test]
fn the_character_level_meaning_survives_the_lexer() {
    // llguidance's Lark terminals are greedy: written as multi-character terminals these would
    // reject texts GBNF accepts. The translation's one-character terminals keep GBNF's meaning.
    let st = gbnf(r#"root ::= [0-9]+ [0-9]"#);
    check("digits", &st, &["12", "12345"], &["1"]);
    let st = gbnf(r#"root ::= ("a" | "ab") "bc""#);
    check("prefix", &st, &["abc", "abbc"], &["ab", "abcc"]);
    // The hazard is real: the same grammar as hand-written Lark with a two-byte terminal loses
    // "abc".
    let lark = compile(ConstraintSpec::Lark(r#"start: ("a" | "ab") "bc""#.into())).unwrap();
    assert!(!matches(&lark, "abc"), "llguidance's greedy lexer changed?");
}

#[test]
fn recursion_including_left_recursion() {
    let st = gbnf("root ::= list\nlist ::= list \",\" item | item\nitem ::= [a-z]\n");
    check("left", &st, &["a", "a,b,c"], &["a,", ",a", "ab"]);
    let st = gbnf("root ::= \"(\" root \")\" | \"\"\n");
    check("nested", &st, &["", "()", "((()))"], &["(()", ")("]);
}

#[test]
fn token_references_translate_to_llguidance_tokens() {
    assert!(gbnf_to_lark("root ::= <[12]> !<[7]>\n")
        .unwrap()
        .contains("g_root: <[12]> <[^7]>"));
    assert!(gbnf_to_lark("root ::= <think> \"x\"\n")
        .unwrap()
        .contains("g_root: <think> \"x\""));
    // `<[256]>` is the byte vocabulary's end token, a special token: allowed where the grammar
    // says, which here is nowhere near text.
    let st = gbnf("root ::= \"a\" <[65]>\n");
    check("token", &st, &["aA"], &["a", "aB"]);
}

/// The error for `text`, as the message a client reads.
fn error(text: &str) -> String {
    let e = gbnf_to_lark(text).expect_err(text);
    let via_compile = compile(ConstraintSpec::Gbnf(text.into()))
        .expect_err(text)
        .to_string();
    assert!(via_compile.contains(&e.to_string()), "{via_compile} / {e}");
    assert!(via_compile.contains("`grammar`"), "{via_compile}");
    e.to_string()
}

fn assert_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} should contain {p:?}");
    }
}

#[test]
fn bad_grammars_name_line_rule_and_problem() {
    assert_has(
        &error("root ::= \"a\"\nitem = \"b\"\n"),
        &["line 2", "column 6", "rule `item`", "expected `::=`"],
    );
    assert_has(
        &error("root ::= item\n"),
        &[
            "line 1",
            "column 10",
            "rule `root`",
            "`item` is used but never defined",
        ],
    );
    assert_has(&error("item ::= \"a\"\n"), &["no `root` rule"]);
    assert_has(
        &error("root ::= \"a\\q\"\n"),
        &["line 1", "column 12", "unknown escape `\\q`"],
    );
    assert_has(
        &error("root ::= \"\\x4\"\n"),
        &["`\\x` needs exactly 2 hex digits"],
    );
    assert_has(&error("root ::= \"abc\n"), &["not closed (missing `\"`)"]);
    assert_has(
        &error("root ::= (\"a\" | \"b\"\n"),
        &["expected `)` to close the `(` at line 1, column 10"],
    );
    assert_has(&error("root ::= * \"a\"\n"), &["`*` has no item before it"]);
    assert_has(&error("root ::= \"\"+\n"), &["`+` has no item before it"]);
    // llama.cpp ends a rule at its line's end: an alternative on the next line is an error there.
    assert_has(
        &error("root ::= \"a\"\n  | \"b\"\n"),
        &["line 2", "column 3", "expected a rule name"],
    );
    assert_has(
        &error("root ::= \"a\" ; \"b\"\n"),
        &["line 1", "column 14", "unexpected `;`"],
    );
    assert_has(
        &error("root ::= \"a\"\nroot ::= \"b\"\n"),
        &["line 2", "`root` is defined twice (first on line 1)"],
    );
    assert_has(&error("root ::= [z-a]\n"), &["range `z-a` is reversed"]);
    assert_has(&error("root ::= []\n"), &["empty character class"]);
    assert_has(&error("root ::= [abc\n"), &["not closed (missing `]`)"]);
    assert_has(&error("root ::= \"a\"{2001}\n"), &["limit of 2000"]);
    assert_has(
        &error("root ::= \"a\"{3,2}\n"),
        &["maximum is below the minimum"],
    );
    assert_has(&error("root ::= \"a\"{x}\n"), &["expected a number"]);
    assert_has(
        &error("root ::= \"\\U00110000\"\n"),
        &["not a Unicode character"],
    );
    assert_has(&error("root ::= !<x>\n"), &["write the token by id"]);
    assert_has(&error("root ::= \"a\")\n"), &["a `)` without its `(`"]);
    let deep = format!("root ::= {}\"a\"{}\n", "(".repeat(300), ")".repeat(300));
    assert_has(&error(&deep), &["nested too deeply"]);
}

fn field_spec(field: &str, text: &str) -> ConstraintSpec {
    let mut o = serde_json::Map::new();
    o.insert(field.into(), json!(text));
    ConstraintRequest::from_request(&o)
        .expect("valid field")
        .expect("a constraint")
        .spec
}

#[test]
fn request_fields_read_gbnf_or_lark_by_llama_cpp_and_vllm_rules() {
    // llama-server's `grammar`: GBNF, unless it starts with `%llguidance` (llama.cpp's marker).
    assert!(matches!(
        field_spec("grammar", "root ::= \"a\""),
        ConstraintSpec::Gbnf(_)
    ));
    assert!(matches!(
        field_spec("grammar", "start: \"a\""),
        ConstraintSpec::Gbnf(_)
    ));
    assert!(matches!(
        field_spec("grammar", "%llguidance {}\nstart: \"a\""),
        ConstraintSpec::Lark(_)
    ));
    // vLLM's `guided_grammar`: GBNF when a rule is defined with `::=`, Lark otherwise.
    assert!(matches!(
        field_spec("guided_grammar", "# c ::= d\nroot ::= \"a\""),
        ConstraintSpec::Gbnf(_)
    ));
    assert!(matches!(
        field_spec("guided_grammar", "// x ::= y\nstart: \"a\""),
        ConstraintSpec::Lark(_)
    ));
    // A Lark grammar sent as `grammar` without the marker is GBNF and fails to read as such,
    // naming what is wrong, instead of being silently taken as Lark.
    let e = compile(field_spec("grammar", "start: \"a\""))
        .unwrap_err()
        .to_string();
    assert_has(&e, &["GBNF line 1", "expected `::=`"]);
    let st = compile(field_spec(
        "grammar",
        "%llguidance {}\nstart: \"a\" | \"b\"",
    ))
    .unwrap();
    check("marked lark", &st, &["a", "b"], &["ab"]);
}

#[test]
fn large_nested_repetitions_compile_and_count_exactly() {
    // llama.cpp expands repetitions into rules and refuses this one by its own count; llguidance
    // counts instead of expanding, so it compiles at once and still counts exactly.
    let st = gbnf("root ::= (\"ab\"{2000}){2}\n");
    let ab = |n: usize| "ab".repeat(n);
    check("nested", &st, &[&ab(4000)], &[&ab(3999), &ab(4001), "a"]);
    gbnf("root ::= ((\"ab\"{2000}){2000}){2000}\n");
}
