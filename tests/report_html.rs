//! Integration tests of the graphical reports: the SVG roofline chart (structure, one mark per
//! op, ceilings at the right pixels) and the HTML report (self-contained, escaped, and loaded in
//! real headless Chromium, which must run its script without a single error).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use roofline::analysis::{
    self, import, Analysis, AnalyzeOptions, Diagnostic, NodeStatus, Severity,
};
use roofline::builtin::{self, WeightFill};
use roofline::report::chart::{
    render_roofline_svg, ChartSeries, ColorBy, Rgb, SeriesMarker, SeriesPoint, SvgOptions,
};
use roofline::report::html::render_html;

const CHROMIUM: &str = "/usr/bin/chromium";

fn analyse(model: &str, device: &str) -> Analysis {
    let builtin_model = builtin::find(model).expect("built-in model");
    let proto = builtin_model.build(WeightFill::Zeros);
    let source = format!("builtin:{model}");
    let graph = import::import_model(&proto, Path::new("."), Path::new(&source)).expect("import");
    let profile = roofline::device::find_device(device)
        .expect("catalogue device")
        .to_profile();
    let options = AnalyzeOptions {
        bindings: (builtin_model.default_bindings)(),
        ..AnalyzeOptions::default()
    };
    analysis::analyze_graph(graph, &source, &profile, &options).expect("analysis")
}

/// A probed-CPU-like profile: two precisions and four memory levels, as `roofline probe` saves.
fn cpu_profile() -> roofline::device::DeviceProfile {
    use roofline::device::{
        ComputeCeiling, DeviceKind, MemoryCeiling, MemoryLevel, Precision, ProfileSource,
    };
    let mut profile = roofline::device::find_device("rtx2080ti")
        .expect("catalogue device")
        .to_profile();
    profile.id = "local".to_string();
    profile.name = "Test CPU <8 cores>".to_string();
    profile.kind = DeviceKind::Cpu;
    profile.source = ProfileSource::Probed;
    profile.launch_overhead_s = 2e-7;
    profile.compute = [(Precision::Fp64, 0.4e12), (Precision::Fp32, 0.8e12)]
        .into_iter()
        .map(|(precision, flops_per_s)| ComputeCeiling {
            precision,
            flops_per_s,
            threads: Some(8),
            theoretical_flops_per_s: Some(flops_per_s * 1.1),
            source: "FMA microbenchmark".to_string(),
        })
        .collect();
    profile.memory = [
        (MemoryLevel::L1, 3.2e12),
        (MemoryLevel::L2, 1.1e12),
        (MemoryLevel::L3, 0.4e12),
        (MemoryLevel::Dram, 60e9),
    ]
    .into_iter()
    .map(|(level, bytes_per_s)| MemoryCeiling {
        level,
        bytes_per_s,
        write_bytes_per_s: None,
        capacity_bytes: None,
        threads: Some(8),
        source: "read sweep".to_string(),
    })
    .collect();
    profile
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-html");
    std::fs::create_dir_all(&dir).expect("creating the test output folder");
    dir
}

fn has_class(node: &roxmltree::Node<'_, '_>, class: &str) -> bool {
    node.attribute("class")
        .is_some_and(|classes| classes.split_whitespace().any(|c| c == class))
}

fn data_ops(doc: &roxmltree::Document<'_>, class: &str) -> Vec<usize> {
    let mut ops: Vec<usize> = doc
        .descendants()
        .filter(|n| has_class(n, class))
        .map(|n| {
            n.attribute("data-op")
                .expect("every op mark has data-op")
                .parse()
                .expect("data-op is an index")
        })
        .collect();
    ops.sort_unstable();
    ops
}

/// Makes an analysis awkward: a hostile node name and one op that was not costed.
fn with_hostile_name_and_uncosted_op(mut analysis: Analysis) -> (Analysis, usize) {
    analysis.nodes[0].name = r#"evil<script>alert("x")</script>&'q'"#.to_string();
    let victim = analysis
        .nodes
        .iter()
        .rposition(|n| n.status == NodeStatus::Costed)
        .expect("a costed op");
    let node = &mut analysis.nodes[victim];
    node.status = NodeStatus::NotCosted;
    node.reason = Some("unknown op <Custom>".to_string());
    node.intensity = None;
    node.predicted_s = 0.0;
    node.time_share = 0.0;
    let (name, op_type) = (node.name.clone(), node.op_type.clone());
    analysis.summary.not_costed += 1;
    analysis.summary.costed_nodes -= 1;
    analysis.summary.not_costed_ops.push((op_type.clone(), 1));
    analysis.diagnostics.push(Diagnostic {
        severity: Severity::Warning,
        node: Some(name),
        op_type: Some(op_type),
        message: "not costed: unknown op <Custom>".to_string(),
    });
    (analysis, victim)
}

#[test]
fn svg_holds_one_mark_per_costed_op() {
    // BERT has zero-FLOP Transposes (intensity 0: drawn in the legend strip, not on the axes).
    for (model, device) in [("resnet50", "rtx2080ti"), ("bert-base", "a100")] {
        let analysis = analyse(model, device);
        let svg = render_roofline_svg(&analysis, &SvgOptions::default()).expect("svg");
        std::fs::write(out_dir().join(format!("{model}-{device}.svg")), &svg).expect("write");
        let doc = roxmltree::Document::parse(&svg).expect("the chart parses as XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        assert_eq!(root.attribute("width"), Some("1200"));
        assert_eq!(root.attribute("height"), Some("800"));
        let expected: Vec<usize> = analysis
            .nodes
            .iter()
            .filter(|n| n.status == NodeStatus::Costed && n.intensity.is_some())
            .map(|n| n.index)
            .collect();
        assert_eq!(
            data_ops(&doc, "op-dot"),
            expected,
            "{model}: one dot per costed op"
        );
        let labels = data_ops(&doc, "op-label");
        assert_eq!(
            labels.len(),
            10,
            "{model}: the ten most expensive ops are labelled"
        );
        for op in labels {
            assert!(analysis.summary.hot_spots.contains(&op));
        }
    }
}

#[test]
fn uncosted_ops_are_marked_apart_and_names_are_escaped() {
    let (analysis, victim) = with_hostile_name_and_uncosted_op(analyse("tinycnn", "rtx2080ti"));
    let options = SvgOptions {
        color_by: ColorBy::OpType,
        ..SvgOptions::default()
    };
    let svg = render_roofline_svg(&analysis, &options).expect("svg");
    assert!(
        !svg.contains("<script>"),
        "a node name leaked unescaped into the SVG"
    );
    let doc = roxmltree::Document::parse(&svg).expect("the chart parses as XML");
    assert_eq!(data_ops(&doc, "op-not-costed"), vec![victim]);
    assert!(!data_ops(&doc, "op-dot").contains(&victim));
    let text: String = doc
        .descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .collect();
    assert!(
        text.contains("1 not costed"),
        "the legend counts the op that was not costed"
    );
}

#[test]
fn overlay_series_are_drawn_and_linked_to_ops() {
    let analysis = analyse("tinycnn", "rtx2080ti");
    let points: Vec<SeriesPoint> = analysis
        .nodes
        .iter()
        .filter_map(|n| {
            let intensity = n.intensity.filter(|i| *i > 0.0)?;
            Some(SeriesPoint {
                op_index: Some(n.index),
                intensity,
                flops_per_s: n.attainable_flops / 3.0,
                label: Some(format!("{} measured", n.name)),
            })
        })
        .collect();
    let count = points.len();
    let options = SvgOptions {
        overlays: vec![ChartSeries {
            name: "measured".to_string(),
            colour: Rgb(0, 0x9e, 0x73),
            marker: SeriesMarker::Diamond,
            points,
            connect_to_predicted: true,
        }],
        ..SvgOptions::default()
    };
    let svg = render_roofline_svg(&analysis, &options).expect("svg");
    let doc = roxmltree::Document::parse(&svg).expect("parses");
    assert_eq!(data_ops(&doc, "series-point").len(), count);
    assert_eq!(data_ops(&doc, "series-link").len(), count);
}

/// Parses a tick label such as `0.1`, `100`, `1k` or `10T`.
fn tick_value(text: &str) -> Option<f64> {
    let (number, factor) = match text.chars().last()? {
        'k' => (&text[..text.len() - 1], 1e3),
        'M' => (&text[..text.len() - 1], 1e6),
        'G' => (&text[..text.len() - 1], 1e9),
        'T' => (&text[..text.len() - 1], 1e12),
        'P' => (&text[..text.len() - 1], 1e15),
        _ => (text, 1.0),
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// A log10 axis mapping fitted from two tick labels: pixel = a + b × log10(value).
struct Axis {
    a: f64,
    b: f64,
}

impl Axis {
    fn from_ticks(ticks: &[(f64, f64)]) -> Axis {
        assert!(ticks.len() >= 3, "at least three labelled decades");
        let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
        let b = (last.1 - first.1) / (last.0.log10() - first.0.log10());
        Axis {
            a: first.1 - b * first.0.log10(),
            b,
        }
    }

    fn pixel(&self, value: f64) -> f64 {
        self.a + self.b * value.log10()
    }
}

fn attr_f64(node: &roxmltree::Node<'_, '_>, name: &str) -> f64 {
    node.attribute(name)
        .unwrap_or_else(|| panic!("missing {name}"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

/// Golden test: the ceilings of the RTX 2080 Ti (13.4 TFLOP/s FP32 and 616 GB/s, Turing
/// whitepaper) sit where the axes' own tick labels say those values are, within a pixel.
#[test]
fn golden_ceiling_positions_on_tinycnn() {
    let analysis = analyse("tinycnn", "rtx2080ti");
    let svg = render_roofline_svg(&analysis, &SvgOptions::default()).expect("svg");
    std::fs::write(out_dir().join("tinycnn-rtx2080ti.svg"), &svg).expect("write");
    let doc = roxmltree::Document::parse(&svg).expect("parses");
    // plotters writes the x tick labels centred on their tick and the y labels right-aligned.
    let mut x_ticks = Vec::new();
    let mut y_ticks = Vec::new();
    for text in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let Some(value) = text.text().map(str::trim).and_then(tick_value) else {
            continue;
        };
        match text.attribute("text-anchor") {
            Some("middle") if text.attribute("transform").is_none() => {
                x_ticks.push((value, attr_f64(&text, "x")))
            }
            Some("end") if text.attribute("class").is_none() => {
                y_ticks.push((value, attr_f64(&text, "y")))
            }
            _ => {}
        }
    }
    x_ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    y_ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    let x_axis = Axis::from_ticks(&x_ticks);
    let y_axis = Axis::from_ticks(&y_ticks);
    // Every tick agrees with the fitted mapping (the axis really is logarithmic).
    for (value, px) in &x_ticks {
        assert!(
            (x_axis.pixel(*value) - px).abs() <= 1.0,
            "x tick {value} at {px}"
        );
    }

    let peak = 13.4e12;
    let bandwidth = 616e9;
    let ridge = peak / bandwidth;
    let ridge_mark = doc
        .descendants()
        .filter(|n| has_class(n, "ridge"))
        .find(|n| (attr_f64(n, "data-intensity") - ridge).abs() < 1e-6 * ridge)
        .expect("the FP32 ridge point is marked");
    assert!((attr_f64(&ridge_mark, "cx") - x_axis.pixel(ridge)).abs() <= 1.0);
    assert!((attr_f64(&ridge_mark, "cy") - y_axis.pixel(peak)).abs() <= 1.0);
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(
        texts.contains(&"fp16 53.8 TFLOP/s · ridge 87.3"),
        "the other ceilings are named at their ridge"
    );
    assert!(
        texts.contains(&"ridge 21.8 FLOP/B"),
        "the ridge is labelled"
    );
    assert!(
        texts.contains(&"fp32 13.4 TFLOP/s"),
        "the FP32 ceiling is labelled"
    );
    assert!(
        texts.contains(&"DRAM 616.0 GB/s"),
        "the DRAM roof is labelled"
    );

    // The roof polyline: starts on the DRAM line, bends at the ridge, ends flat at the peak.
    let roof = doc
        .descendants()
        .find(|n| has_class(n, "roof"))
        .expect("the roof is drawn");
    let points: Vec<(f64, f64)> = roof
        .attribute("points")
        .expect("points")
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').expect("x,y");
            (x.parse().expect("x"), y.parse().expect("y"))
        })
        .collect();
    assert_eq!(points.len(), 3);
    let start_intensity = 10f64.powf((points[0].0 - x_axis.a) / x_axis.b);
    assert!((points[0].1 - y_axis.pixel(start_intensity * bandwidth)).abs() <= 1.5);
    assert!((points[1].0 - x_axis.pixel(ridge)).abs() <= 1.0);
    assert!((points[1].1 - y_axis.pixel(peak)).abs() <= 1.0);
    assert!((points[2].1 - y_axis.pixel(peak)).abs() <= 1.0);

    // The other precisions' ceilings of the catalogue entry, each at its own height.
    for (precision, flops) in [("fp64", 0.42e12), ("fp16", 53.8e12), ("int8", 215.2e12)] {
        let line = doc
            .descendants()
            .find(|n| has_class(n, "compute") && n.attribute("data-precision") == Some(precision))
            .unwrap_or_else(|| panic!("{precision} ceiling drawn"));
        assert!(
            (attr_f64(&line, "y1") - y_axis.pixel(flops)).abs() <= 1.0,
            "{precision}"
        );
    }

    // Dots sit at (intensity, FLOPs ÷ predicted time).
    for dot in doc.descendants().filter(|n| has_class(n, "op-dot")) {
        let op: usize = dot
            .attribute("data-op")
            .expect("data-op")
            .parse()
            .expect("index");
        let node = &analysis.nodes[op];
        let intensity = node.intensity.expect("plotted ops have an intensity");
        let rate = (node.flops + node.transcendental) as f64 / node.predicted_s;
        assert!(
            (attr_f64(&dot, "cx") - x_axis.pixel(intensity)).abs() <= 1.0,
            "dot {op} x"
        );
        assert!(
            (attr_f64(&dot, "cy") - y_axis.pixel(rate)).abs() <= 1.0,
            "dot {op} y"
        );
    }
}

#[test]
fn cache_levels_of_a_probed_cpu_are_drawn_and_labelled() {
    let builtin_model = builtin::find("resnet50").expect("built-in model");
    let proto = builtin_model.build(WeightFill::Zeros);
    let graph = import::import_model(&proto, Path::new("."), Path::new("builtin:resnet50"))
        .expect("import");
    let options = AnalyzeOptions {
        bindings: (builtin_model.default_bindings)(),
        ..AnalyzeOptions::default()
    };
    let analysis = analysis::analyze_graph(graph, "builtin:resnet50", &cpu_profile(), &options)
        .expect("analysis");
    let svg = render_roofline_svg(&analysis, &SvgOptions::default()).expect("svg");
    std::fs::write(out_dir().join("resnet50-cpu.svg"), &svg).expect("write");
    let doc = roxmltree::Document::parse(&svg).expect("parses");
    for level in ["L1", "L2", "L3"] {
        assert!(
            doc.descendants()
                .any(|n| has_class(&n, "memory") && n.attribute("data-level") == Some(level)),
            "{level} roof drawn"
        );
    }
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for label in [
        "L1 3.2 TB/s",
        "L2 1.1 TB/s",
        "L3 400.0 GB/s",
        "DRAM 60.0 GB/s",
    ] {
        assert!(texts.contains(&label), "{label} labelled");
    }
    let ridges = doc.descendants().filter(|n| has_class(n, "ridge")).count();
    assert_eq!(
        ridges, 5,
        "fp64 and fp32 against DRAM, fp32 against L1, L2 and L3"
    );
    if chromium_available() {
        let drawn = drawn_ops(std::slice::from_ref(&analysis));
        check_in_browser(
            &render_html(&[analysis]).expect("html"),
            "browser-resnet50-cpu",
            drawn,
        );
    }
}

#[test]
fn a_model_with_no_costed_op_still_renders() {
    let mut analysis = analyse("tinycnn", "rtx2080ti");
    for node in &mut analysis.nodes {
        node.status = NodeStatus::NotCosted;
        node.intensity = None;
        node.predicted_s = 0.0;
        node.time_share = 0.0;
    }
    analysis.device.compute_ceilings.clear();
    let svg = render_roofline_svg(&analysis, &SvgOptions::default()).expect("svg");
    let doc = roxmltree::Document::parse(&svg).expect("parses");
    assert!(data_ops(&doc, "op-dot").is_empty());
    assert_eq!(data_ops(&doc, "op-not-costed").len(), analysis.nodes.len());
    assert_eq!(
        doc.descendants().filter(|n| has_class(n, "ridge")).count(),
        1
    );
    render_html(&[analysis]).expect("html");
}

#[test]
fn html_is_self_contained_escaped_and_small() {
    let (analysis, _) = with_hostile_name_and_uncosted_op(analyse("resnet50", "rtx2080ti"));
    let html = render_html(std::slice::from_ref(&analysis)).expect("html");
    assert!(
        html.len() < 2_000_000,
        "ResNet-50 report is {} bytes",
        html.len()
    );
    for forbidden in [
        "<script src",
        "<link",
        " src=",
        "@import",
        "url(http",
        "<script>alert",
    ] {
        assert!(!html.contains(forbidden), "report contains `{forbidden}`");
    }
    assert!(html.contains("evil&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;q&#39;"));
    let rows = html.matches("<tr data-op=").count();
    assert_eq!(rows, analysis.nodes.len(), "one table row per node");
    assert_eq!(html.matches("<svg class=\"roofline-chart\"").count(), 1);
    std::fs::write(out_dir().join("resnet50-rtx2080ti.html"), &html).expect("write");
}

#[test]
fn html_compares_devices_side_by_side() {
    let analyses = [
        analyse("mobilenetv2", "rtx2080ti"),
        analyse("mobilenetv2", "a100"),
    ];
    let html = render_html(&analyses).expect("html");
    assert_eq!(html.matches("<svg class=\"roofline-chart\"").count(), 2);
    assert!(html.contains("id=\"chart-0-clip\"") && html.contains("id=\"chart-1-clip\""));
    assert!(html.contains("id=\"comparison-table\""));
    // The comparison table and each device's table hold one row per node.
    assert_eq!(
        html.matches("<tr data-op=").count(),
        3 * analyses[0].nodes.len()
    );
    assert!(matches!(
        render_html(&[]),
        Err(roofline::report::ReportError::NoAnalysis)
    ));
}

/// Runs Chromium headless with the flags that keep it off the network, with a deadline.
/// Returns (stdout, stderr); both go through files so a large DOM dump cannot block on a pipe.
fn run_chromium(args: &[String]) -> (String, String) {
    let scratch = tempdir("chromium");
    let profile = scratch.join("profile");
    let stdout_path = scratch.join("stdout.txt");
    let stderr_path = scratch.join("stderr.txt");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("starting chromium");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("waiting for chromium").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&scratch);
    (stdout, stderr)
}

fn tempdir(name: &str) -> PathBuf {
    let dir = out_dir().join(format!(
        "{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Ops with a mark on some chart (a dot, or a cross when not costed), by index.
fn drawn_ops(analyses: &[Analysis]) -> usize {
    let mut ops = std::collections::BTreeSet::new();
    for analysis in analyses {
        for node in &analysis.nodes {
            let dot = node.status == NodeStatus::Costed && node.intensity.is_some();
            if dot || node.status == NodeStatus::NotCosted {
                ops.insert(node.index);
            }
        }
    }
    ops.len()
}

fn chromium_available() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{CHROMIUM} is missing and CI is set: the browser check must run in CI (apt-get install -y chromium)");
    }
    eprintln!(
        "SKIPPED the headless-browser check of the HTML report: {CHROMIUM} is missing \
         (install it with `apt-get install -y chromium`; CI fails instead of skipping)"
    );
    false
}

/// Loads a report in Chromium: its script must finish (`data-report-ready`), raise no error,
/// place no chart label over another with the real fonts; then takes a screenshot.
fn check_in_browser(html: &str, name: &str, linked_ops: usize) {
    let path = out_dir().join(format!("{name}.html"));
    std::fs::write(&path, html).expect("write report");
    let url = format!(
        "file://{}",
        path.canonicalize().expect("absolute path").display()
    );
    let (dom, stderr) = run_chromium(&["--dump-dom".to_string(), url.clone()]);
    assert!(
        dom.contains("data-report-ready=\"1\""),
        "{name}: the report script did not finish; chromium said:\n{stderr}"
    );
    assert!(
        !dom.contains("data-report-error=\"1\"") && !dom.contains("<div id=\"report-js-error\""),
        "{name}: the report script raised an error:\n{}",
        dom.lines()
            .find(|l| l.contains("<div id=\"report-js-error\""))
            .unwrap_or("")
    );
    for line in stderr.lines().filter(|l| l.contains("CONSOLE")) {
        assert!(
            !line.contains("Uncaught") && !line.contains("rror"),
            "{name}: console error: {line}"
        );
    }
    assert!(
        dom.contains(&format!("data-linked-ops=\"{linked_ops}\"")),
        "{name}: chart marks and table rows are not linked for all {linked_ops} ops"
    );
    let charts = dom.matches("data-label-overlaps=").count();
    assert!(charts >= 1, "{name}: the layout self-check did not run");
    assert_eq!(
        dom.matches("data-label-overlaps=\"0\"").count(),
        charts,
        "{name}: chart labels overlap in the browser"
    );
    let screenshot = out_dir().join(format!("{name}.png"));
    let _ = std::fs::remove_file(&screenshot);
    run_chromium(&[
        format!("--screenshot={}", screenshot.display()),
        "--window-size=1400,2000".to_string(),
        "--hide-scrollbars".to_string(),
        url,
    ]);
    let size = std::fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 20_000,
        "{name}: no usable screenshot at {}",
        screenshot.display()
    );
    eprintln!("screenshot of the {name} report: {}", screenshot.display());
}

#[test]
fn html_report_runs_in_headless_chromium() {
    if !chromium_available() {
        return;
    }
    let (analysis, _) = with_hostile_name_and_uncosted_op(analyse("resnet50", "rtx2080ti"));
    let drawn = drawn_ops(std::slice::from_ref(&analysis));
    check_in_browser(
        &render_html(&[analysis]).expect("html"),
        "browser-resnet50-rtx2080ti",
        drawn,
    );
}

/// Drives the report's own script in the browser: hover a dot, hover a row, sort, filter; the
/// outcome is written into attributes of `<html>` for `--dump-dom` to return.
const INTERACTION_PROBE: &str = r##"<script>
(function () {
  var root = document.documentElement;
  var op = root.getAttribute("data-probe-op");
  var dot = document.querySelector('svg.roofline-chart .op-dot[data-op="' + op + '"]');
  var row = document.querySelector('#ops-0 tbody tr[data-op="' + op + '"]');
  dot.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
  root.setAttribute("data-probe-dot-lights-row", String(row.classList.contains("hl")));
  dot.dispatchEvent(new MouseEvent("mouseout", { bubbles: true, relatedTarget: document.body }));
  root.setAttribute("data-probe-cleared", String(!row.classList.contains("hl")));
  row.cells[1].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
  root.setAttribute("data-probe-row-lights-dot", String(dot.classList.contains("hl")));
  var header = Array.prototype.slice.call(document.querySelectorAll("#ops-0 thead th"))
    .find(function (th) { return th.textContent.trim() === "FLOP/B"; });
  header.querySelector("button").click();
  root.setAttribute("data-probe-most-intense", document.querySelector("#ops-0 tbody tr").getAttribute("data-op"));
  var bound = document.querySelector('.controls[data-table="ops-0"] .filter-bound');
  bound.value = "memory";
  bound.dispatchEvent(new Event("change"));
  var shown = Array.prototype.filter.call(document.querySelectorAll("#ops-0 tbody tr"),
    function (tr) { return !tr.hidden; }).length;
  root.setAttribute("data-probe-memory-rows", String(shown));
  root.setAttribute("data-probe-dimmed", String(document.querySelectorAll(".op-dot.dim").length));
})();
</script>"##;

#[test]
fn report_interactions_work_in_headless_chromium() {
    if !chromium_available() {
        return;
    }
    let analysis = analyse("resnet50", "rtx2080ti");
    let slowest = analysis.summary.hot_spots[0];
    // Sorting by FLOP/B puts the most intense op first (ties in index order).
    let most_intense = analysis
        .nodes
        .iter()
        .filter_map(|n| n.intensity.map(|i| (i, n.index)))
        .fold(None::<(f64, usize)>, |best, (i, index)| match best {
            Some((b, _)) if b >= i => best,
            _ => Some((i, index)),
        })
        .map(|(_, index)| index)
        .expect("an op with an intensity");
    let memory_rows = analysis
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed && n.bound == roofline::analysis::Bound::Memory)
        .count();
    let plotted = analysis
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed && n.intensity.is_some())
        .count();
    let html = render_html(&[analysis])
        .expect("html")
        .replacen(
            "<html lang=\"en\">",
            &format!("<html lang=\"en\" data-probe-op=\"{slowest}\">"),
            1,
        )
        .replacen("</body>", &format!("{INTERACTION_PROBE}</body>"), 1);
    let path = out_dir().join("browser-interactions.html");
    std::fs::write(&path, html).expect("write report");
    let url = format!(
        "file://{}",
        path.canonicalize().expect("absolute path").display()
    );
    let (dom, stderr) = run_chromium(&["--dump-dom".to_string(), url]);
    assert!(
        !dom.contains("data-report-error=\"1\""),
        "script error; chromium said:\n{stderr}"
    );
    for expected in [
        "data-probe-dot-lights-row=\"true\"".to_string(),
        "data-probe-cleared=\"true\"".to_string(),
        "data-probe-row-lights-dot=\"true\"".to_string(),
        format!("data-probe-most-intense=\"{most_intense}\""),
        format!("data-probe-memory-rows=\"{memory_rows}\""),
        format!("data-probe-dimmed=\"{}\"", plotted - memory_rows),
    ] {
        assert!(
            dom.contains(&expected),
            "expected {expected} after the interactions"
        );
    }
}

#[test]
fn multi_device_html_runs_in_headless_chromium() {
    if !chromium_available() {
        return;
    }
    let analyses = [
        analyse("mobilenetv2", "rtx2080ti"),
        analyse("mobilenetv2", "a100"),
    ];
    check_in_browser(
        &render_html(&analyses).expect("html"),
        "browser-mobilenetv2-compare",
        drawn_ops(&analyses),
    );
}

/// Probe for the advice view: counts what the browser actually laid out.
const ADVICE_PROBE: &str = r##"<script>
(function () {
  var root = document.documentElement;
  var rows = document.querySelectorAll('#rewrites tr[data-pass]');
  root.setAttribute("data-probe-pass-rows", String(rows.length));
  var overall = document.querySelector('#rewrites tr[data-pass="overall"]');
  root.setAttribute("data-probe-overall", overall ? overall.cells[4].textContent.trim() : "none");
  var before = document.querySelector('svg.roofline-chart .series[data-name="before rewrites"]');
  root.setAttribute("data-probe-before-points",
    String(before ? before.querySelectorAll('.series-point').length : -1));
  var visible = before ? before.getBoundingClientRect() : null;
  root.setAttribute("data-probe-before-visible", String(!!visible && visible.width > 0 && visible.height > 0));
  root.setAttribute("data-probe-left-alone", String(document.querySelectorAll('#rewrites li.left-alone').length));
})();
</script>"##;

/// `roofline advise --verify --format html` on MobileNetV2 with the float passes and int8: the
/// page must load without a script error, draw the original ops as a second series on the
/// rewritten graph's roofline, list every pass with its measured gain, the quantization
/// decisions and the ops left alone.
#[test]
fn advice_before_after_view_runs_in_headless_chromium() {
    use roofline::advisor::{self, AdviseOptions};
    if !chromium_available() {
        return;
    }
    let model = builtin::find("mobilenetv2").expect("built-in model");
    let graph = model.graph(WeightFill::Random(3)).expect("import");
    let analyze = AnalyzeOptions {
        bindings: (model.default_bindings)(),
        ..AnalyzeOptions::default()
    };
    // Measured on this CPU: only a probed profile is measured, the figures do not matter here.
    let mut device = cpu_profile();
    device.source = roofline::device::ProfileSource::Probed;
    let options = AdviseOptions {
        apply: ["fold", "bn-fold", "fuse", "eltwise", "int8"]
            .map(String::from)
            .to_vec(),
        verify: true,
        runs: 2,
        calibration_samples: 2,
        ..AdviseOptions::default()
    };
    let (report, _) =
        advisor::advise(graph, "builtin:mobilenetv2", &device, &analyze, &options).expect("advise");
    assert!(report.verified);
    assert!(
        !report.left_alone.is_empty(),
        "MobileNetV2 has ops no rewrite helps"
    );
    let overall = report
        .overall
        .measured_speedup
        .expect("measured overall gain");
    let before_points = report
        .before
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed && n.flops > 0 && n.predicted_s > 0.0)
        .filter(|n| n.intensity.is_some())
        .count();
    let html = roofline::report::advice::render_advice_html(&report).expect("html");
    assert!(html.contains("Quantization") && html.contains("Accuracy proxy"));
    let drawn = drawn_ops(std::slice::from_ref(&report.after));
    check_in_browser(&html, "browser-advice-mobilenetv2", drawn);
    let html = html.replacen("</body>", &format!("{ADVICE_PROBE}</body>"), 1);
    let path = out_dir().join("browser-advice-probe.html");
    std::fs::write(&path, html).expect("write report");
    let url = format!(
        "file://{}",
        path.canonicalize().expect("absolute path").display()
    );
    let (dom, stderr) = run_chromium(&["--dump-dom".to_string(), url]);
    assert!(
        !dom.contains("data-report-error=\"1\""),
        "script error; chromium said:\n{stderr}"
    );
    for expected in [
        format!("data-probe-pass-rows=\"{}\"", report.passes.len() + 1),
        format!("data-probe-overall=\"{overall:.2}x\""),
        format!("data-probe-before-points=\"{before_points}\""),
        "data-probe-before-visible=\"true\"".to_string(),
        format!("data-probe-left-alone=\"{}\"", report.left_alone.len()),
    ] {
        assert!(
            dom.contains(&expected),
            "expected {expected} in the advice view"
        );
    }
}

/// The compression report: the compressed model's page with the original ops as an overlay,
/// and a section with the search whose trajectory chart is valid SVG with one point per step
/// (plus the original) on each line; in Chromium when it is installed.
#[test]
fn compress_report_draws_the_trajectory_and_both_rooflines() {
    use roofline::advisor::compress::{self, CompressOptions, Target};
    use roofline::advisor::AdviseOptions;
    let model = builtin::find("mobilenetv2").expect("built-in model");
    let graph = model.graph(WeightFill::Random(3)).expect("import");
    let analyze = AnalyzeOptions {
        bindings: (model.default_bindings)(),
        ..AnalyzeOptions::default()
    };
    let device = roofline::device::find_device("rtx2080ti")
        .expect("catalogue device")
        .to_profile();
    let options = CompressOptions {
        target: Target::Speedup(1.3),
        precisions: Vec::new(),
        advise: AdviseOptions {
            calibration_samples: 2,
            ..AdviseOptions::default()
        },
        ..CompressOptions::default()
    };
    let result = compress::compress(
        graph,
        "builtin:mobilenetv2",
        &device,
        &analyze,
        &options,
        &mut |_| {},
    )
    .expect("compress");
    let report = &result.report;
    assert!(report.reached && !report.steps.is_empty());
    let html = roofline::report::compress::render_compress_html(report).expect("html");
    assert!(html.contains("id=\"compression\""));
    assert!(html.contains("original model"), "the original ops overlay");
    let start = html
        .find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\"")
        .expect("trajectory svg");
    let end = start + html[start..].find("</svg>").expect("closed") + "</svg>".len();
    let doc = roxmltree::Document::parse(&html[start..end]).expect("trajectory is valid SVG");
    let lines: Vec<usize> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| {
            n.attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .collect();
    assert_eq!(
        lines,
        vec![report.steps.len() + 1; 3],
        "predicted, corrected, accuracy"
    );
    if chromium_available() {
        let drawn = drawn_ops(std::slice::from_ref(&report.after));
        check_in_browser(&html, "browser-compress-mobilenetv2", drawn);
    }
}
