//! Bounds on what a request may ask the grammar compiler to do, and the stack it runs on.
//!
//! llguidance compiles schemas and grammars by recursion: a `$ref` chain, an `anyOf` chain, a
//! rule that uses a rule that uses a rule... each costs a few kilobytes of stack per level. On a
//! 2 MiB worker thread a few hundred levels overflow it, and a stack overflow aborts the whole
//! process, every in-flight request with it. So:
//!
//! * the input is measured first, without recursion: at most [`MAX_GRAMMAR_RULES`] rule and
//!   terminal definitions in a grammar, at most [`crate::keywords::MAX_SCHEMA_NODES`]
//!   subschemas in a schema (brackets and regexes are bounded by llguidance's own readers); the
//!   compiler's recursion is at most as deep as the number of definitions (or subschemas);
//! * the compile runs on a thread of its own with [`COMPILE_STACK_BYTES`] of stack, which the
//!   test `stack_depth` shows holds inputs at every limit with an eighth of that stack. Only the
//!   pages a compile touches are ever committed, so the size costs address space, not memory.

use crate::error::GrammarError;

/// The stack of the thread that compiles a constraint and computes its first mask.
pub const COMPILE_STACK_BYTES: usize = 512 << 20;

/// The most rule and terminal definitions a grammar (GBNF or Lark) may hold.
pub const MAX_GRAMMAR_RULES: usize = 10_000;

/// Run `f` on a thread with [`COMPILE_STACK_BYTES`] of stack (`stack` overrides, for tests).
pub(crate) fn on_compile_stack<T: Send>(
    stack: usize,
    f: impl FnOnce() -> T + Send,
) -> Result<T, String> {
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("grammar-compile".into())
            .stack_size(stack)
            .spawn_scoped(s, f)
            .map_err(|e| format!("cannot start the grammar compiler's thread: {e}"))?;
        h.join()
            .map_err(|_| "the grammar compiler failed unexpectedly".to_string())
    })
}

/// Check a Lark grammar's size before it reaches the compiler: its definitions (a name at the
/// start of a line followed by `:`, as Lark writes rules and terminals). Bracket nesting needs no
/// check here: llguidance's Lark reader refuses more than 30 levels itself.
pub(crate) fn check_lark(field: &str, text: &str) -> Result<(), GrammarError> {
    let too_large = |what: &str, limit: usize| GrammarError::TooLarge {
        field: field.to_string(),
        what: what.to_string(),
        limit,
    };
    let mut rules = 0usize;
    for line in text.lines() {
        if is_definition(line) {
            rules += 1;
            if rules > MAX_GRAMMAR_RULES {
                return Err(too_large(
                    "rule and terminal definitions",
                    MAX_GRAMMAR_RULES,
                ));
            }
        }
    }
    Ok(())
}

/// `name:`, `?name:`, `!name:`, `NAME.2:` or `name{x}:` at the start of a line.
fn is_definition(line: &str) -> bool {
    let l = line.trim_start();
    let l = l.strip_prefix(['?', '!']).unwrap_or(l);
    let name_len = l
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(l.len());
    if name_len == 0 || l.as_bytes()[0].is_ascii_digit() {
        return false;
    }
    let rest = l[name_len..].trim_start();
    let rest = match rest.strip_prefix('.') {
        Some(r) => r.trim_start_matches(|c: char| c.is_ascii_digit() || c == '-'),
        None => rest,
    };
    let rest = match rest.strip_prefix('{') {
        Some(r) => r.split_once('}').map_or("", |(_, after)| after),
        None => rest,
    };
    rest.trim_start().starts_with(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_counted_and_literals_skipped() {
        assert!(is_definition("start: a"));
        assert!(is_definition("  ?expr : a | b"));
        assert!(is_definition("NUMBER.2: /[0-9]+/"));
        assert!(is_definition("list{x}: x (\",\" x)*"));
        assert!(!is_definition("    | b c"));
        assert!(!is_definition("%import common.WS"));
        assert!(!is_definition("2: x"));
    }
}
