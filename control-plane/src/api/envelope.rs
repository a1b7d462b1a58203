//! The success envelope of spec 2.1 and the paging parameters every list shares.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;

/// `{success: true, data}` around a single object or an unpaged array.
#[derive(Debug, Serialize, ToSchema)]
pub struct Envelope<T> {
    pub success: bool,
    pub data: T,
}

/// `{success: true, data: [...], meta: {total, page, limit}}` around one page of a list.
#[derive(Debug, Serialize, ToSchema)]
pub struct Paged<T> {
    pub success: bool,
    pub data: Vec<T>,
    pub meta: PageMeta,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct PageMeta {
    pub total: i64,
    pub page: i64,
    pub limit: i64,
    /// Present and true when `total` is a floor: a list whose exact count would cost
    /// too much counts no further than that (the audit trail's filtered pages, the
    /// policy evaluations).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub total_is_lower_bound: bool,
}

/// 200 with `data`.
pub fn ok<T: Serialize>(data: T) -> Response {
    (
        StatusCode::OK,
        axum::Json(Envelope {
            success: true,
            data,
        }),
    )
        .into_response()
}

/// 201 with `data`, for a newly created resource.
pub fn created<T: Serialize>(data: T) -> Response {
    (
        StatusCode::CREATED,
        axum::Json(Envelope {
            success: true,
            data,
        }),
    )
        .into_response()
}

/// 200 with one page of a list and its `meta`.
pub fn paged<T: Serialize>(data: Vec<T>, page: Page, total: i64) -> Response {
    paged_counted(data, page, total, false)
}

/// The most matches a filtered list counts: beyond, its `total` is this and says it is
/// a floor (`total_is_lower_bound`), so a page of a filter matching millions stays fast.
pub const COUNT_LIMIT: i64 = 10_000;

/// As [`paged`], saying whether `total` is only a floor of the count.
pub fn paged_counted<T: Serialize>(
    data: Vec<T>,
    page: Page,
    total: i64,
    total_is_lower_bound: bool,
) -> Response {
    let meta = PageMeta {
        total,
        page: page.page,
        limit: page.limit,
        total_is_lower_bound,
    };
    (
        StatusCode::OK,
        axum::Json(Paged {
            success: true,
            data,
            meta,
        }),
    )
        .into_response()
}

/// 204 without a body, for deletes.
pub fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// Paging query parameters: `page` from 1 (default 1), `limit` 1 to 100 (default 20).
#[derive(Debug, Clone, Copy, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page number, starting at 1.
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    /// Items per page.
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

/// Validated paging: `offset()` is what SQL needs.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub page: i64,
    pub limit: i64,
}

pub const DEFAULT_PAGE_SIZE: i64 = 20;
pub const MAX_PAGE_SIZE: i64 = 100;
/// The last page a list answers (the OpenAPI document's `maximum`).
pub const MAX_PAGE: i64 = 1_000_000;

impl Page {
    pub fn offset(self) -> i64 {
        (self.page - 1) * self.limit
    }
}

impl TryFrom<PageQuery> for Page {
    type Error = ApiError;

    fn try_from(query: PageQuery) -> Result<Self, ApiError> {
        let page = query.page.unwrap_or(1);
        let limit = query.limit.unwrap_or(DEFAULT_PAGE_SIZE);
        if !(1..=MAX_PAGE).contains(&page) {
            return Err(ApiError::validation(
                "page",
                format!("page: must be 1 to {MAX_PAGE}"),
            ));
        }
        if !(1..=MAX_PAGE_SIZE).contains(&limit) {
            return Err(ApiError::validation(
                "limit",
                format!("limit: must be 1 to {MAX_PAGE_SIZE}"),
            ));
        }
        Ok(Page { page, limit })
    }
}
