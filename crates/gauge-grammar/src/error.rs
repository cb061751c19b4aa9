//! What can go wrong between a request's constraint and a compiled stage.

/// A constraint that cannot be used, naming the request field it came from.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum GrammarError {
    /// The field has the wrong shape (e.g. `response_format.type` is not a known type).
    #[error("`{field}` = {value}: expected {allowed}")]
    Field {
        field: String,
        value: String,
        allowed: String,
    },
    /// The grammar engine could not compile the schema or grammar.
    #[error("`{field}`: the {what} cannot be compiled: {message}")]
    Compile {
        field: String,
        what: &'static str,
        message: String,
    },
    /// The schema or grammar is larger than the compiler may be given (see `limits`).
    #[error(
        "`{field}`: the constraint holds more than {limit} {what}, the most a request may send"
    )]
    TooLarge {
        field: String,
        what: String,
        limit: usize,
    },
    /// A schema keyword the grammar would not enforce (see `keywords`), in a strict request.
    #[error(
        "`{field}`: {keyword} at `{path}` cannot be enforced ({why}); remove it, or send \
         `lenient_schema: true` to generate without it"
    )]
    Unenforced {
        field: String,
        path: String,
        keyword: String,
        why: String,
    },
    /// Two constraint fields in one request.
    #[error("`{first}` and `{second}` both constrain the output: send one of them")]
    Conflict { first: String, second: String },
    /// A setting that cannot work together with a constraint.
    #[error("`{field}` = {value} cannot be combined with a grammar: {why}")]
    Incompatible {
        field: String,
        value: String,
        why: String,
    },
    /// The vocabulary could not be turned into the grammar engine's token trie.
    #[error("the model's vocabulary cannot be used for grammars: {0}")]
    Vocab(String),
}

impl GrammarError {
    /// The request field the error is about.
    pub fn field(&self) -> Option<&str> {
        match self {
            GrammarError::Field { field, .. }
            | GrammarError::Compile { field, .. }
            | GrammarError::TooLarge { field, .. }
            | GrammarError::Unenforced { field, .. }
            | GrammarError::Incompatible { field, .. } => Some(field),
            GrammarError::Conflict { second, .. } => Some(second),
            GrammarError::Vocab(_) => None,
        }
    }
}
