//! A page's filters from its URL, read as the API reads its query: into the API's own
//! query type (the same names, limits and validation), after dropping the fields a
//! form left empty. The page keeps the pairs to build its links (the next page, an
//! export of what is shown) under the same filters.

use axum::extract::{FromRequestParts, RawQuery};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::page::PageError;

/// The query `T` of a page's URL, and its non-empty pairs.
pub struct Filters<T> {
    pub query: T,
    pairs: Vec<(String, String)>,
}

impl<T> Filters<T> {
    /// The value of `name` as given, or empty.
    pub fn get(&self, name: &str) -> &str {
        self.pairs
            .iter()
            .find(|(key, _)| key == name)
            .map_or("", |(_, value)| value.as_str())
    }

    /// The query string of these filters with `name` set to `value` (or removed, when
    /// `value` is empty), as a link's `?` part. `page` is dropped unless it is `name`:
    /// a link that changes anything else starts at the first page.
    pub fn with(&self, name: &str, value: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, current) in &self.pairs {
            if key != name && key != "page" {
                query.append_pair(key, current);
            }
        }
        if !value.is_empty() {
            query.append_pair(name, value);
        }
        query.finish()
    }

    /// The query string of these filters, without the page.
    pub fn without_page(&self) -> String {
        self.with("page", "")
    }
}

impl<S, T> FromRequestParts<S> for Filters<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, PageError> {
        let RawQuery(raw) = RawQuery::from_request_parts(parts, state)
            .await
            .unwrap_or(RawQuery(None));
        let pairs = given_pairs(raw.unwrap_or_default().as_bytes(), "");
        let query = read_pairs::<T>(&pairs).map_err(|error| {
            PageError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!("These filters are not valid: {error}."),
            )
        })?;
        Ok(Filters { query, pairs })
    }
}

/// The pairs of a URL query or form body that carry a value, all but `skip`: a field
/// left empty is absent, as an API request would leave it out.
pub fn given_pairs(encoded: &[u8], skip: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(encoded)
        .filter(|(key, value)| key != skip && !value.trim().is_empty())
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect()
}

/// `pairs` read as `T` by serde's URL-encoding rules (numbers and booleans from text).
pub fn read_pairs<T: DeserializeOwned>(
    pairs: &[(String, String)],
) -> Result<T, serde_urlencoded::de::Error> {
    let encoded = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    serde_urlencoded::from_str(&encoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filters(pairs: &[(&str, &str)]) -> Filters<()> {
        Filters {
            query: (),
            pairs: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn links_keep_the_filters_and_start_over_unless_they_page() {
        let shown = filters(&[("event_type", "agent.blocked"), ("page", "3")]);
        assert_eq!(shown.with("page", "4"), "event_type=agent.blocked&page=4");
        assert_eq!(
            shown.with("actor", "proxy"),
            "event_type=agent.blocked&actor=proxy"
        );
        assert_eq!(shown.with("event_type", ""), "");
        assert_eq!(shown.without_page(), "event_type=agent.blocked");
        assert_eq!(shown.get("event_type"), "agent.blocked");
        assert_eq!(shown.get("actor"), "");
    }
}
