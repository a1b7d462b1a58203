//! The OpenAI endpoints the proxy forwards, and how each is named on the way to the
//! provider and in usage records.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Embeddings,
    /// OpenAI's Responses API (`POST /v1/responses`), the default of agent frameworks
    /// such as the OpenAI Agents SDK.
    Responses,
}

impl Endpoint {
    /// The path after the provider's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Responses => "/responses",
        }
    }

    /// The `request_type` of the request's usage record and policy decision.
    pub fn request_type(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat.completions",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Responses => "responses",
        }
    }

    /// Whether the client may ask for the answer as server-sent events (`stream: true`).
    pub fn streams(self) -> bool {
        matches!(self, Endpoint::ChatCompletions | Endpoint::Responses)
    }

    /// Whether a stream reports usage only when asked (`stream_options.include_usage`,
    /// which the proxy adds): chat completions. The Responses API reports it in its
    /// `response.completed` event always.
    pub fn usage_on_request(self) -> bool {
        self == Endpoint::ChatCompletions
    }
}
