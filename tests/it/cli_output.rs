//! What the binary writes, and where: closed pipes and full disks, outputs that would replace an
//! input, out-of-range counts, and hostile names on the terminal and in CSV (issue 18).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use prost::Message;

use super::cli::tempdir;
use super::common::{repo_root, roofline, stderr, stdout};

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_roofline"));
    command.current_dir(repo_root());
    command
}

/// `roofline export builtin:tinycnn -o DIR/m.onnx`, through the binary.
fn exported_tinycnn(dir: &Path) -> PathBuf {
    let path = dir.join("m.onnx");
    let out = roofline(&["export", "builtin:tinycnn", "-o", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    path
}

/// tinycnn with its first node renamed, written to `dir/file`.
fn tinycnn_with_node(dir: &Path, file: &str, name: &str, op_type: Option<&str>) -> PathBuf {
    let mut model = roofline::builtin::find("tinycnn")
        .unwrap()
        .build(roofline::builtin::WeightFill::Random(3));
    let node = &mut model.graph.as_mut().unwrap().node[0];
    node.name = name.into();
    if let Some(op_type) = op_type {
        node.op_type = op_type.into();
    }
    let path = dir.join(file);
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

fn assert_no_panic(out: &Output) {
    let err = stderr(out);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

/// Raw terminal control bytes (ESC, BEL, CSI as UTF-8) anywhere in `bytes`.
fn has_raw_controls(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.chars().any(|c| c.is_control() && c != '\n')
}

#[test]
fn a_reader_that_closes_early_ends_the_output_quietly() {
    // `devices --json` (70 kB) is larger than a pipe's buffer: the binary is still writing
    // when the reader goes away, so the broken pipe is certain; `devices` may fit the buffer.
    for args in [&["devices"][..], &["devices", "--json"][..]] {
        let mut child = binary()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdout.take().unwrap();
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while pipe.read(&mut byte).unwrap() == 1 {
            line.push(byte[0]);
            if byte[0] == b'\n' {
                break;
            }
        }
        assert!(line.len() > 1, "{args:?}: no first line");
        drop(pipe);
        let out = child.wait_with_output().unwrap();
        assert_no_panic(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}: a closed pipe is not an error");
    }
}

#[test]
fn a_full_disk_is_one_error_line_and_status_2() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("SKIP: no /dev/full on this system");
        return;
    };
    for args in [
        &["devices"][..],
        &["devices", "--json"][..],
        &["models"][..],
        &["analyze", "builtin:tinycnn"][..],
    ] {
        let out = binary()
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        assert_no_panic(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].starts_with("error: writing to stdout: "), "{err}");
    }
}

#[test]
fn no_output_replaces_the_model() {
    let dir = tempdir();
    let model = exported_tinycnn(&dir);
    let original = std::fs::read(&model).unwrap();
    let link = dir.join("link.onnx");
    std::os::unix::fs::symlink(&model, &link).unwrap();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let m = model.to_str().unwrap();
    let same_file = [
        model.clone(),
        link.clone(),
        dir.join("sub/../m.onnx"),
        dir.join("./m.onnx"),
    ];
    for target in &same_file {
        let t = target.to_str().unwrap();
        let commands: [&[&str]; 5] = [
            &["analyze", m, "--batch", "1", "-o", t],
            &[
                "advise",
                m,
                "--batch",
                "1",
                "-d",
                "rtx2080ti",
                "--report",
                t,
            ],
            &["advise", m, "--batch", "1", "-d", "rtx2080ti", "-o", t],
            &["bench", m, "--batch", "1", "-d", "rtx2080ti", "-o", t],
            &["analyze", m, "--batch", "1", "--format", "csv", "-o", t],
        ];
        for args in commands {
            let out = roofline(args);
            assert_no_panic(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
            let err = stderr(&out);
            assert!(
                err.contains("refusing to overwrite the model") && err.contains(m),
                "{args:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
            assert_eq!(std::fs::read(&model).unwrap(), original, "{args:?}");
            assert!(
                std::fs::symlink_metadata(&link)
                    .unwrap()
                    .file_type()
                    .is_symlink(),
                "{args:?}: the link was replaced"
            );
        }
    }
    // The two outputs of `advise` are not the same file either.
    let report = dir.join("r.txt");
    let out = roofline(&[
        "advise",
        m,
        "--batch",
        "1",
        "-d",
        "rtx2080ti",
        "-o",
        report.to_str().unwrap(),
        "--report",
        dir.join("sub/../r.txt").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("same file"), "{}", stderr(&out));
    assert!(!report.exists());

    // A report elsewhere is written whole, with no temporary file left behind.
    let json = dir.join("report.json");
    let out = roofline(&[
        "analyze",
        m,
        "--batch",
        "1",
        "--format",
        "json",
        "-o",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let parsed: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(parsed["schema"], "roofline-analysis");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(std::fs::read(&model).unwrap(), original);
}

#[test]
fn run_never_writes_over_its_inputs() {
    let dir = tempdir();
    let model = exported_tinycnn(&dir);
    let m = model.to_str().unwrap();
    // Where `run` writes tinycnn's output: the name comes from the model.
    let first = dir.join("first");
    let out = roofline(&["run", m, "--batch", "1", "-o", first.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let written: Vec<PathBuf> = std::fs::read_dir(&first)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let tensor = roofline::exec::npy::read_npy(&written[0]).unwrap();
    assert_eq!(tensor.shape, vec![1, 1000], "the .npy reads back");
    let file_name = written[0].file_name().unwrap().to_owned();

    // An input tensor stored where the output would go is refused, and left as it was.
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let input = out_dir.join(&file_name);
    let x = roofline::exec::RtTensor {
        shape: vec![1, 3, 32, 32],
        data: roofline::exec::RtData::F32(vec![0.25; 3 * 32 * 32]),
    };
    roofline::exec::npy::write_npy(&input, &x).unwrap();
    let before = std::fs::read(&input).unwrap();
    let spec = format!("input={}", input.display());
    for target in [out_dir.clone(), dir.join("first/../out")] {
        let out = roofline(&["run", m, "--input", &spec, "-o", target.to_str().unwrap()]);
        assert_no_panic(&out);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("refusing to overwrite an input tensor"),
            "{}",
            stderr(&out)
        );
        assert_eq!(std::fs::read(&input).unwrap(), before);
    }
    // The same input from another folder: the output is written.
    let out = roofline(&["run", m, "--input", &spec, "-o", first.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn counts_out_of_range_are_refused_before_any_work() {
    let started = std::time::Instant::now();
    let cases: [&[&str]; 16] = [
        &["bench", "builtin:tinycnn", "--runs", "4294967296"],
        &["bench", "builtin:tinycnn", "--min-time=-1"],
        &["bench", "builtin:tinycnn", "--min-time", "61"],
        &["bench", "builtin:tinycnn", "--min-time", "nan"],
        &["bench", "builtin:tinycnn", "--min-time", "abc"],
        &["bench", "builtin:tinycnn", "--runs", "0"],
        &["bench", "builtin:tinycnn", "--runs=-1"],
        &["bench", "builtin:tinycnn", "--batch", "0"],
        &["bench", "builtin:tinycnn", "--threads", "0"],
        &["bench", "builtin:tinycnn", "--threads", "1000000"],
        &["analyze", "builtin:tinycnn", "--batch", "0"],
        &[
            "run",
            "builtin:tinycnn",
            "--batch",
            "0",
            "-o",
            "/nonexistent/x",
        ],
        &["advise", "builtin:tinycnn", "--batch", "0"],
        &[
            "advise",
            "builtin:tinycnn",
            "--runs",
            "18446744073709551615",
        ],
        &["advise", "builtin:tinycnn", "--calibration-samples", "0"],
        &["probe", "--threads", "0"],
    ];
    for args in cases {
        let out = roofline(args);
        assert_no_panic(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.starts_with("error: invalid value"), "{args:?}: {err}");
        assert!(stdout(&out).is_empty());
    }
    // Refused by the argument parser: no run, no probe, no allocation had the time to start.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn hostile_names_reach_the_terminal_escaped() {
    let dir = tempdir();
    let model = tinycnn_with_node(&dir, "evil\u{1b}[2J.onnx", "conv\u{1b}[31m\u{7}red", None);
    let m = model.to_str().unwrap();
    let table = roofline(&["analyze", m, "--batch", "1", "--all-ops"]);
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(!has_raw_controls(&table.stdout), "{}", stdout(&table));
    let text = stdout(&table);
    assert!(text.contains("conv\\u{1b}[31m\\u{7}red"), "{text}");
    assert!(text.contains("evil\\u{1b}[2J.onnx"), "{text}");

    // JSON keeps the name exactly (serde escapes it).
    let json = roofline(&["analyze", m, "--batch", "1", "--format", "json"]);
    assert!(json.status.success());
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(parsed["nodes"][0]["name"], "conv\u{1b}[31m\u{7}red");
    assert!(!has_raw_controls(&json.stdout));

    for args in [
        &[
            "bench",
            m,
            "--batch",
            "1",
            "-d",
            "rtx2080ti",
            "--runs",
            "1",
            "--min-time",
            "0",
        ][..],
        &["advise", m, "--batch", "1", "-d", "rtx2080ti"][..],
    ] {
        let out = roofline(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(!has_raw_controls(&out.stdout), "{}", stdout(&out));
        assert!(!has_raw_controls(&out.stderr), "{}", stderr(&out));
    }

    // An unknown op with an escape sequence in its type: the error line quotes it, escaped.
    let unknown = tinycnn_with_node(
        &dir,
        "unknown.onnx",
        "n\u{1b}]0;x\u{7}",
        Some("Evil\u{1b}[5m"),
    );
    let out = roofline(&["analyze", unknown.to_str().unwrap(), "--batch", "1"]);
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!has_raw_controls(&out.stdout), "{}", stdout(&out));
    assert!(!has_raw_controls(&out.stderr), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("n\\u{1b}]0;x\\u{7}"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn csv_cells_a_spreadsheet_would_evaluate_start_with_an_apostrophe() {
    let dir = tempdir();
    let model = tinycnn_with_node(&dir, "formula.onnx", "=cmd|' /C calc'!A0", None);
    let out = roofline(&[
        "analyze",
        model.to_str().unwrap(),
        "--batch",
        "1",
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.contains("calc"))
        .unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = row.split(',').collect();
    assert_eq!(cells[3], "'=cmd|' /C calc'!A0", "{row}");
    // Numbers are left alone.
    assert!(cells[2].parse::<usize>().is_ok(), "{row}");
    assert!(cells[7].parse::<u64>().is_ok(), "{row}");
}
