//! Provider names in request bodies. Deserializing accepts any well-formed name (stored
//! usage and the proxies' state must read whatever another replica's configuration
//! declared); the API takes only the built-ins and the providers this deployment declares
//! (`providers.custom`), so that a misspelt `block_provider` cannot block nothing.

use warden_shared::catalog::ProviderCatalog;
use warden_shared::registry::Provider;

use crate::error::{ApiError, ApiResult};

/// Refuses (422, `details.field` = `field`) the first name `catalog` does not know.
pub fn require_known<'p>(
    catalog: &ProviderCatalog,
    field: &str,
    providers: impl IntoIterator<Item = &'p Provider>,
) -> ApiResult<()> {
    let Some(unknown) = providers.into_iter().find(|p| !catalog.knows(**p)) else {
        return Ok(());
    };
    let declared: Vec<&str> = catalog
        .declared()
        .iter()
        .map(|d| d.provider.as_str())
        .collect();
    let declared = if declared.is_empty() {
        "none declared".to_owned()
    } else {
        format!("declared: {}", declared.join(", "))
    };
    Err(ApiError::validation(
        field,
        format!(
            "`{unknown}` is not a provider of this deployment (openai, anthropic, google, \
             nvidia, bedrock; {declared})"
        ),
    ))
}
