//! Budget limit request bodies and the rules a limit must keep (spec 2.11, 4.6).

use serde::Deserialize;
use utoipa::ToSchema;
use warden_shared::pricing::usd_to_micros;

use crate::error::{ApiError, ApiResult};

/// `monthly_limit_usd` runs from 0 to 999,999.
pub const MAX_MONTHLY_LIMIT_USD: f64 = 999_999.0;
pub const DEFAULT_WARN_PCT: i64 = 80;
pub const DEFAULT_BLOCK_PCT: i64 = 100;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBudgetLimitInput {
    /// The team whose agents' spend the limit counts. Set at most one of `team_id` and
    /// `agent_id`; neither: a tenant-wide limit.
    #[serde(default)]
    pub team_id: Option<String>,
    /// The agent whose spend the limit counts.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// 0 to 999999 US dollars per calendar month (UTC).
    #[schema(minimum = 0, maximum = 999_999)]
    pub monthly_limit_usd: f64,
    /// 1 to 100, default 80: requests past it carry a warning header, and the first
    /// crossing each month is recorded.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub warn_threshold_pct: Option<i64>,
    /// 1 to 200, default 100, at least `warn_threshold_pct`: requests are refused (402)
    /// from it on.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub block_threshold_pct: Option<i64>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// Any of the limit's amounts and flag; its scope cannot change (create another limit).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateBudgetLimitInput {
    #[serde(default)]
    #[schema(minimum = 0, maximum = 999_999)]
    pub monthly_limit_usd: Option<f64>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub warn_threshold_pct: Option<i64>,
    /// At least the (new or current) `warn_threshold_pct`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub block_threshold_pct: Option<i64>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A limit's checked amounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amounts {
    pub monthly_limit_micros: i64,
    pub warn_threshold_pct: i64,
    pub block_threshold_pct: i64,
}

pub fn check_limit_usd(usd: f64) -> ApiResult<i64> {
    if usd.is_finite() && (0.0..=MAX_MONTHLY_LIMIT_USD).contains(&usd) {
        Ok(usd_to_micros(usd))
    } else {
        Err(ApiError::validation(
            "monthly_limit_usd",
            "monthly_limit_usd: must be a number from 0 to 999999",
        ))
    }
}

/// Checks the thresholds' ranges and that warning comes no later than blocking.
pub fn check_thresholds(warn: i64, block: i64) -> ApiResult<(i64, i64)> {
    if !(1..=100).contains(&warn) {
        return Err(ApiError::validation(
            "warn_threshold_pct",
            "warn_threshold_pct: must be an integer from 1 to 100",
        ));
    }
    if !(1..=200).contains(&block) {
        return Err(ApiError::validation(
            "block_threshold_pct",
            "block_threshold_pct: must be an integer from 1 to 200",
        ));
    }
    if warn > block {
        return Err(ApiError::validation(
            "warn_threshold_pct",
            "warn_threshold_pct: must not exceed block_threshold_pct (a warning after the \
             block would never be seen)",
        ));
    }
    Ok((warn, block))
}

impl CreateBudgetLimitInput {
    pub fn amounts(&self) -> ApiResult<Amounts> {
        let monthly_limit_micros = check_limit_usd(self.monthly_limit_usd)?;
        let (warn_threshold_pct, block_threshold_pct) = check_thresholds(
            self.warn_threshold_pct.unwrap_or(DEFAULT_WARN_PCT),
            self.block_threshold_pct.unwrap_or(DEFAULT_BLOCK_PCT),
        )?;
        Ok(Amounts {
            monthly_limit_micros,
            warn_threshold_pct,
            block_threshold_pct,
        })
    }
}

impl UpdateBudgetLimitInput {
    /// `current` with this update applied, checked as a whole.
    pub fn apply(&self, current: Amounts) -> ApiResult<Amounts> {
        let monthly_limit_micros = match self.monthly_limit_usd {
            Some(usd) => check_limit_usd(usd)?,
            None => current.monthly_limit_micros,
        };
        let (warn_threshold_pct, block_threshold_pct) = check_thresholds(
            self.warn_threshold_pct
                .unwrap_or(current.warn_threshold_pct),
            self.block_threshold_pct
                .unwrap_or(current.block_threshold_pct),
        )?;
        Ok(Amounts {
            monthly_limit_micros,
            warn_threshold_pct,
            block_threshold_pct,
        })
    }
}
