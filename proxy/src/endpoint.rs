//! The OpenAI endpoints the proxy forwards, and how each is named on the way to the
//! provider and in usage records.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Embeddings,
    /// OpenAI's Responses API (`POST /v1/responses`), the default of agent frameworks
    /// such as the OpenAI Agents SDK.
    Responses,
    /// Anthropic's Messages API (`POST /v1/messages`), as the Anthropic SDKs call it.
    Messages,
    /// Anthropic's token count of a Messages request (free; recorded with no tokens).
    MessagesCountTokens,
}

impl Endpoint {
    /// The path after the provider's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Responses => "/responses",
            Endpoint::Messages => "/messages",
            Endpoint::MessagesCountTokens => "/messages/count_tokens",
        }
    }

    /// The `request_type` of the request's usage record and policy decision.
    pub fn request_type(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat.completions",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::MessagesCountTokens => "messages.count_tokens",
        }
    }

    /// Whether the endpoint is Anthropic's: served for Anthropic's models only, its
    /// refusals in Anthropic's error shape.
    pub fn is_anthropic(self) -> bool {
        matches!(self, Endpoint::Messages | Endpoint::MessagesCountTokens)
    }

    /// Whether the client may ask for the answer as server-sent events (`stream: true`).
    pub fn streams(self) -> bool {
        matches!(
            self,
            Endpoint::ChatCompletions | Endpoint::Responses | Endpoint::Messages
        )
    }

    /// Whether a stream reports usage only when asked (`stream_options.include_usage`,
    /// which the proxy adds): chat completions. The Responses API reports it in its
    /// `response.completed` event always.
    pub fn usage_on_request(self) -> bool {
        self == Endpoint::ChatCompletions
    }
}
