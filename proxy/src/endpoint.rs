//! The OpenAI endpoints the proxy forwards, and how each is named on the way to the
//! provider and in usage records.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Embeddings,
}

impl Endpoint {
    /// The path after the provider's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Embeddings => "/embeddings",
        }
    }

    /// The `request_type` of the request's usage record and policy decision.
    pub fn request_type(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat.completions",
            Endpoint::Embeddings => "embeddings",
        }
    }
}
