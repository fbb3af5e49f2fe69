//! Line charts in SVG for the benches' results (plotters' SVG backend: no system fonts
//! needed): one panel with an x and a y axis, one line per series and a legend.

use plotters::coord::Shift;
use plotters::prelude::*;

/// The series colours, in order (matplotlib's first five).
pub(crate) const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
];

/// A round upper bound for an axis whose data reach `max`: the next multiple of a
/// 1, 2, 2.5 or 5 × 10ⁿ step that gives at most about 10 steps.
pub(crate) fn nice_max(max: f64) -> f64 {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let mut decade = 10f64.powf(max.log10().floor() - 1.0);
    loop {
        for m in [1.0, 2.0, 2.5, 5.0] {
            let step = m * decade;
            if max / step <= 10.0 {
                return (max / step).ceil() * step;
            }
        }
        decade *= 10.0;
    }
}

/// One line.
pub(crate) struct Series {
    /// The legend text.
    pub label: String,
    /// Its colour (one of [`COLORS`], say).
    pub color: RGBColor,
    /// The points, in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A chart's frame: title, axis descriptions and ranges (both axes start at 0).
pub(crate) struct Frame<'a> {
    /// The caption above the chart.
    pub title: &'a str,
    /// What the x axis shows.
    pub x_desc: &'a str,
    /// What the y axis shows.
    pub y_desc: &'a str,
    /// The x axis ends here.
    pub x_max: f64,
    /// The y axis ends here.
    pub y_max: f64,
    /// Where the legend goes.
    pub legend: SeriesLabelPosition,
}

/// Draws `series` as lines in `area`.
pub(crate) fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    frame: &Frame,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(frame.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..frame.x_max, 0.0..frame.y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(frame.x_desc)
        .y_desc(frame.y_desc)
        .x_labels(12)
        .y_labels(6)
        .x_label_formatter(&|x| label(*x, frame.x_max))
        .y_label_formatter(&|y| label(*y, frame.y_max))
        .draw()
        .map_err(err)?;
    for s in series {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(frame.legend.clone())
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// An axis label: whole numbers, or one decimal on an axis that ends at 5 or below.
fn label(v: f64, max: f64) -> String {
    if max <= 5.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}
