//! Charts as data (what scenarios produce) and their rendering to SVG and
//! PNG with plotters.
//!
//! Text is drawn with the DejaVu Sans font bundled in `assets/` (registered
//! with plotters' `ab_glyph` backend), so charts look the same on a machine
//! with no system fonts.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// One chart file: panels stacked vertically.
#[derive(Clone, Debug)]
pub struct Chart {
    /// File name without extension (`.svg` and `.png` are written).
    pub stem: String,
    /// Height of each panel in pixels (the width is fixed).
    pub panel_height: u32,
    /// The panels, top to bottom.
    pub panels: Vec<Panel>,
}

/// A labelled line of points.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// `(x, y)` points in x order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series from any points.
    pub fn new(label: impl Into<String>, points: impl IntoIterator<Item = (f64, f64)>) -> Self {
        Series {
            label: label.into(),
            points: points.into_iter().collect(),
        }
    }
}

/// A dashed reference level (a limit), with its legend text.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The level, in the value axis' units.
    pub value: f64,
    /// Legend text.
    pub label: String,
}

impl Reference {
    /// A reference level.
    pub fn new(value: f64, label: impl Into<String>) -> Self {
        Reference {
            value,
            label: label.into(),
        }
    }
}

/// One plot.
#[derive(Clone, Debug)]
pub enum Panel {
    /// Lines over a numeric x axis.
    Lines {
        /// Panel title.
        title: String,
        /// X axis description, with units.
        x_label: String,
        /// Y axis description, with units.
        y_label: String,
        /// Logarithmic y axis (values below its floor are drawn on it).
        log_y: bool,
        /// The top of the y axis; from the data when `None`.
        y_max: Option<f64>,
        /// The lines.
        series: Vec<Series>,
        /// An optional horizontal reference.
        reference: Option<Reference>,
    },
    /// Horizontal bars, one per label.
    Bars {
        /// Panel title.
        title: String,
        /// Value axis description, with units.
        y_label: String,
        /// `(label, value)` top to bottom.
        bars: Vec<(String, f64)>,
        /// An optional vertical reference.
        reference: Option<Reference>,
    },
}

const WIDTH: u32 = 1100;
const FONT: &str = "sans-serif";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans.ttf");
        // The font is compiled in and known good; a failure here would be a
        // build defect, reported by every chart as a drawing error.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, bytes);
    });
}

/// Writes `dir/<stem>.svg` and `dir/<stem>.png`.
pub fn render(chart: &Chart, dir: &Path) -> Result<(), String> {
    register_font();
    let size = (WIDTH, chart.panel_height * chart.panels.len().max(1) as u32);
    let svg = dir.join(format!("{}.svg", chart.stem));
    let png = dir.join(format!("{}.png", chart.stem));
    let fail = |file: &Path, e: String| format!("drawing {}: {e}", file.display());
    draw(&SVGBackend::new(&svg, size).into_drawing_area(), chart).map_err(|e| fail(&svg, e))?;
    draw(&BitMapBackend::new(&png, size).into_drawing_area(), chart).map_err(|e| fail(&png, e))?;
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((chart.panels.len().max(1), 1));
    for (area, panel) in areas.iter().zip(&chart.panels) {
        match panel {
            Panel::Lines { .. } => lines(area, panel),
            Panel::Bars { .. } => bars(area, panel),
        }
        .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

/// An axis label: up to three decimals, no trailing zeros (`50`, `0.5`).
fn tick(v: &f64) -> String {
    let r = (v * 1000.0).round() / 1000.0;
    format!("{r}")
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A distinct, print-friendly colour per series.
fn colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(23, 190, 207),
    ];
    COLOURS[i % COLOURS.len()]
}

fn lines<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panel: &Panel) -> DrawResult<DB> {
    let Panel::Lines {
        title,
        x_label,
        y_label,
        log_y,
        y_max,
        series,
        reference,
    } = panel
    else {
        return Ok(());
    };
    let points = series.iter().flat_map(|s| &s.points);
    let (x0, x1) = points
        .clone()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (x0, x1) = if x0 <= x1 { (x0, x1) } else { (0.0, 1.0) };
    let y_top = y_max.unwrap_or_else(|| {
        points
            .map(|p| p.1)
            .chain(reference.iter().map(|r| r.value))
            .fold(1.0f64, f64::max)
    });
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72);
    if *log_y {
        let floor = 0.5;
        let mut ctx = builder.build_cartesian_2d(x0..x1, (floor..y_top * 1.5).log_scale())?;
        let clamp = |y: f64| y.max(floor);
        draw_lines(&mut ctx, x_label, y_label, series, reference, clamp)
    } else {
        let mut ctx = builder.build_cartesian_2d(x0..x1, 0.0..y_top * 1.35)?;
        draw_lines(&mut ctx, x_label, y_label, series, reference, |y| y)
    }
}

fn draw_lines<'a, DB, Y>(
    ctx: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    reference: &Option<Reference>,
    clamp: impl Fn(f64) -> f64,
) -> DrawResult<DB>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    ctx.configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = colour(i);
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (x, clamp(y))).collect();
        ctx.draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
    }
    if let Some(r) = reference {
        let (xa, xb) = (ctx.x_range().start, ctx.x_range().end);
        let dash = BLACK.stroke_width(1);
        ctx.draw_series(DashedLineSeries::new(
            vec![(xa, r.value), (xb, r.value)],
            8,
            6,
            dash,
        ))?
        .label(r.label.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], dash));
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .draw()
}

fn bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, panel: &Panel) -> DrawResult<DB> {
    let Panel::Bars {
        title,
        y_label,
        bars,
        reference,
    } = panel
    else {
        return Ok(());
    };
    let n = bars.len() as u32;
    let top = bars
        .iter()
        .map(|b| b.1)
        .chain(reference.iter().map(|r| r.value))
        .fold(1.0f64, f64::max)
        * 1.12;
    let mut ctx = ChartBuilder::on(area)
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(210)
        // A discrete range includes its end: `0..n - 1` is the n bars, with no
        // empty row above them.
        .build_cartesian_2d(0.0..top, (0u32..n.saturating_sub(1)).into_segmented())?;
    let labels: Vec<&str> = bars.iter().map(|b| b.0.as_str()).collect();
    // Bars are listed top to bottom; segment 0 is at the bottom.
    let name = |v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(i) if *i < n => labels[(n - 1 - i) as usize].to_string(),
        _ => String::new(),
    };
    ctx.configure_mesh()
        .x_desc(y_label)
        .x_label_formatter(&tick)
        .y_labels(n as usize)
        .y_label_formatter(&name)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .disable_y_mesh()
        .draw()?;
    let fill = colour(0).mix(0.8).filled();
    ctx.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        let seg = n - 1 - i as u32;
        let mut r = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(seg)),
                (*v, SegmentValue::Exact(seg + 1)),
            ],
            fill,
        );
        r.set_margin(5, 5, 0, 0);
        r
    }))?;
    ctx.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        let seg = n - 1 - i as u32;
        Text::new(
            format!("{v}"),
            (*v + top * 0.005, SegmentValue::CenterOf(seg)),
            (FONT, 14).into_font().color(&BLACK),
        )
    }))?;
    if let Some(r) = reference {
        let red = RGBColor(200, 0, 0).stroke_width(2);
        ctx.draw_series(DashedLineSeries::new(
            vec![
                (r.value, SegmentValue::Exact(0)),
                (r.value, SegmentValue::Exact(n)),
            ],
            8,
            6,
            red,
        ))?
        .label(r.label.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], red));
        ctx.configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.5))
            .draw()?;
    }
    Ok(())
}
