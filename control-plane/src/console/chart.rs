//! A bar chart drawn on the server as SVG: no script, nothing the Content-Security-Policy
//! must allow, readable without colour (the axis is labelled, and the page puts the
//! chart's table beside it). One path draws every bar, so a 90-day hourly range (2,160
//! bars) stays a few tens of kilobytes.

use std::fmt::Write;

use crate::api::cost::CostPoint;

/// The drawing's size in its own units (the page scales it to its width).
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 240.0;
/// Room on the left for the axis' labels, and below for the dates.
const LEFT: f64 = 72.0;
const BOTTOM: f64 = 24.0;

pub struct BarChart {
    /// The bars, as an SVG path's `d`.
    pub bars: String,
    pub width: f64,
    pub height: f64,
    pub left: f64,
    /// Where the plot's floor is.
    pub floor: f64,
    /// The value at the top of the axis, as shown.
    pub top_label: String,
    pub first_label: String,
    pub last_label: String,
    /// What the chart shows, in words (its accessible description).
    pub summary: String,
}

impl BarChart {
    pub fn of(series: &[CostPoint], granularity: &str) -> BarChart {
        let floor = HEIGHT - BOTTOM;
        let highest = series.iter().map(|p| p.cost_usd).fold(0.0, f64::max);
        let top = nice_ceiling(highest);
        let slot = (WIDTH - LEFT) / series.len().max(1) as f64;
        // A gap between bars while they are wide enough to show one.
        let bar = if slot >= 4.0 { slot * 0.8 } else { slot };
        let mut bars = String::new();
        for (index, point) in series.iter().enumerate() {
            if point.cost_usd <= 0.0 {
                continue;
            }
            let height = (point.cost_usd / top * (floor - 8.0)).max(1.0);
            let x = LEFT + index as f64 * slot + (slot - bar) / 2.0;
            let _ = write!(
                bars,
                "M{x:.2} {floor:.2}v-{height:.2}h{bar:.2}v{height:.2}z"
            );
        }
        let date = |point: Option<&CostPoint>| {
            point.map_or(String::new(), |p| {
                let text = p.timestamp.to_string();
                match granularity {
                    "hour" => text[..16].replace('T', " "),
                    _ => text[..10].to_owned(),
                }
            })
        };
        let total: f64 = series.iter().map(|p| p.cost_usd).sum();
        BarChart {
            summary: format!(
                "Spend per {granularity} from {} to {}: {} buckets, {} in all, at most {} in one.",
                date(series.first()),
                date(series.last()),
                series.len(),
                super::page::usd(total),
                super::page::usd(highest),
            ),
            bars,
            width: WIDTH,
            height: HEIGHT,
            left: LEFT,
            floor,
            top_label: super::page::usd(top),
            first_label: date(series.first()),
            last_label: date(series.last()),
        }
    }
}

/// The axis' top: the smallest 1, 2 or 5 times a power of ten at or above `value`.
fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let power = 10_f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|step| step * power)
        .find(|candidate| *candidate >= value * (1.0 - 1e-12))
        .unwrap_or(10.0 * power)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_ends_at_a_round_value_at_or_above_the_highest_bar() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(1.2), 2.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(420.0), 500.0);
        assert!((nice_ceiling(0.000_3) - 0.000_5).abs() < 1e-15);
    }
}
