//! The standing adversarial suite (issue 18): models built to escape the model's folder, to
//! hang the loader, or to hand the kernels inconsistent tensors; corrupt device profiles. Each
//! case must end with exit status 2, one `error:` line naming the problem, no panic, and no byte
//! read from outside the model's folder. (Output-stream and overwrite cases: `cli_output.rs`;
//! mutated models through every stage: `fuzz_exec.rs`; written models against the onnx checker:
//! `export_checker.rs`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use prost::Message;
use roofline::analysis::onnx_proto::{
    attribute_type, AttributeProto, ModelProto, NodeProto, StringStringEntryProto, TensorProto,
};
use roofline::builtin::{self, WeightFill};

use super::cli::{tempdir, TempDir};
use super::common::{repo_root, stderr, stdout};

const SECRET: &[u8] = b"TOP-SECRET-CONTENTS-OUTSIDE-THE-MODEL-FOLDER!!!!";

fn tinycnn() -> ModelProto {
    builtin::find("tinycnn")
        .unwrap()
        .build(WeightFill::Random(1))
}

/// Runs the binary with a deadline: a hang (a FIFO opened for reading) fails the test instead of
/// blocking the suite. `envs` are added to the environment.
fn run_with_deadline(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_roofline"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    // The output is collected on another thread (a full pipe would otherwise block the child),
    // and the child killed when it runs past the deadline.
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.expect("output"),
        Err(_) => {
            // SAFETY: sends SIGKILL to the child this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("roofline {args:?} hung for 60 s");
        }
    }
}

/// Exit 2, no panic, one `error:` line that mentions `must_mention`.
fn assert_refused(output: &Output, args: &[&str], must_mention: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let error_lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        error_lines.len(),
        1,
        "{args:?}: one error line expected: {err}"
    );
    assert!(
        err.contains(must_mention),
        "{args:?}: `{must_mention}` not in: {err}"
    );
}

fn refused(args: &[&str], must_mention: &str) {
    let output = run_with_deadline(args, &[]);
    assert_refused(&output, args, must_mention);
}

/// Writes `model` as `name` in `dir`; returns the path as a string.
fn save(dir: &Path, name: &str, model: &ModelProto) -> String {
    let path = dir.join(name);
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path.to_str().unwrap().to_string()
}

/// Moves the first initializer's bytes to external data with these entries.
fn externalise(model: &mut ModelProto, entries: &[(&str, &str)]) -> Vec<u8> {
    let init: &mut TensorProto = &mut model.graph.as_mut().unwrap().initializer[0];
    let payload = std::mem::take(&mut init.raw_data).to_vec();
    init.data_location = 1;
    init.external_data = entries
        .iter()
        .map(|(k, v)| StringStringEntryProto {
            key: k.to_string(),
            value: v.to_string(),
        })
        .collect();
    payload
}

/// A folder holding a secret file, outside every model folder (the folder lives as long as the
/// guard returned with the file's path).
fn secret_file() -> (TempDir, PathBuf) {
    let outside = tempdir();
    let secret = outside.join("secret.bin");
    // As long as the weight, so a length check alone would not stop the read.
    let mut bytes = SECRET.repeat(4096);
    bytes.truncate(1 << 20);
    std::fs::write(&secret, bytes).unwrap();
    (outside, secret)
}

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system node.
    let status = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    assert_eq!(status, 0, "mkfifo {}", path.display());
}

#[test]
fn external_data_through_a_file_symlink_is_not_read() {
    let dir = tempdir();
    let (_outside, secret) = secret_file();
    std::os::unix::fs::symlink(&secret, dir.join("weights.bin")).unwrap();
    let mut model = tinycnn();
    externalise(&mut model, &[("location", "weights.bin")]);
    let path = save(&dir, "m.onnx", &model);
    let out_dir = dir.join("out");
    for args in [
        vec!["analyze", path.as_str(), "--batch", "1"],
        vec![
            "run",
            path.as_str(),
            "--batch",
            "1",
            "-o",
            out_dir.to_str().unwrap(),
        ],
        vec![
            "advise",
            path.as_str(),
            "--batch",
            "1",
            "-o",
            dir.join("opt.onnx").to_str().unwrap(),
        ],
    ] {
        let output = run_with_deadline(&args, &[]);
        assert_refused(&output, &args, "outside the model's directory");
        assert!(!stdout(&output).contains("TOP-SECRET"));
    }
    assert!(!dir.join("opt.onnx").exists(), "nothing may be written");
}

#[test]
fn external_data_through_a_directory_symlink_is_not_read() {
    let dir = tempdir();
    let (_outside, secret) = secret_file();
    std::os::unix::fs::symlink(secret.parent().unwrap(), dir.join("sub")).unwrap();
    let mut model = tinycnn();
    externalise(&mut model, &[("location", "sub/secret.bin")]);
    let path = save(&dir, "m.onnx", &model);
    refused(
        &["analyze", &path, "--batch", "1"],
        "outside the model's directory",
    );
}

#[test]
fn external_data_with_dot_dot_or_absolute_locations_is_refused() {
    let dir = tempdir();
    let (_outside, secret) = secret_file();
    for location in [
        "../secret.bin".to_string(),
        "a/../../secret.bin".to_string(),
        secret.to_str().unwrap().to_string(),
    ] {
        let mut model = tinycnn();
        externalise(&mut model, &[("location", &location)]);
        let path = save(&dir, "m.onnx", &model);
        refused(
            &["analyze", &path, "--batch", "1"],
            "location must be a relative path inside the model's directory",
        );
    }
}

#[test]
fn symlink_inside_the_model_folder_is_followed() {
    // A link that stays inside the folder is legitimate (weights kept under another name).
    let dir = tempdir();
    let mut model = tinycnn();
    let payload = externalise(&mut model, &[("location", "weights.bin")]);
    std::fs::create_dir_all(dir.join("store")).unwrap();
    std::fs::write(dir.join("store/real.bin"), payload).unwrap();
    std::os::unix::fs::symlink("store/real.bin", dir.join("weights.bin")).unwrap();
    let path = save(&dir, "m.onnx", &model);
    let output = run_with_deadline(&["analyze", &path, "--batch", "1"], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn outputs_never_replace_external_data() {
    let dir = tempdir();
    let mut model = tinycnn();
    let payload = externalise(&mut model, &[("location", "weights.bin")]);
    std::fs::write(dir.join("weights.bin"), &payload).unwrap();
    let path = save(&dir, "m.onnx", &model);
    let weights = dir.join("weights.bin");
    for args in [
        vec![
            "analyze",
            path.as_str(),
            "--batch",
            "1",
            "-o",
            weights.to_str().unwrap(),
        ],
        vec![
            "advise",
            path.as_str(),
            "--batch",
            "1",
            "-o",
            weights.to_str().unwrap(),
        ],
    ] {
        let output = run_with_deadline(&args, &[]);
        assert_refused(
            &output,
            &args,
            "refusing to overwrite the model's external data",
        );
    }
    assert_eq!(
        std::fs::read(&weights).unwrap(),
        payload,
        "weights.bin untouched"
    );
}

#[test]
fn fifos_do_not_hang_the_loader() {
    let dir = tempdir();
    mkfifo(&dir.join("weights.bin"));
    let mut model = tinycnn();
    externalise(&mut model, &[("location", "weights.bin")]);
    let path = save(&dir, "m.onnx", &model);
    refused(&["analyze", &path, "--batch", "1"], "a FIFO");
    // The model itself as a FIFO.
    let fifo_model = dir.join("fifo.onnx");
    mkfifo(&fifo_model);
    refused(&["analyze", fifo_model.to_str().unwrap()], "a FIFO");
    // A directory where the model should be.
    refused(&["analyze", dir.to_str().unwrap()], "a directory");
}

#[test]
fn external_data_offsets_and_lengths_are_validated() {
    let dir = tempdir();
    let mut probe = tinycnn();
    let payload = externalise(&mut probe, &[("location", "weights.bin")]);
    std::fs::write(dir.join("weights.bin"), &payload).unwrap();
    let length = payload.len().to_string();
    for (offset, len, mention) in [
        (
            "-8",
            length.as_str(),
            "offset `-8` is not a non-negative integer",
        ),
        (
            "abc",
            length.as_str(),
            "offset `abc` is not a non-negative integer",
        ),
        ("0", "-1", "length `-1` is not a non-negative integer"),
        ("18446744073709551615", "2", "requested but the file holds"),
        ("8", length.as_str(), "requested but the file holds"),
    ] {
        let mut model = tinycnn();
        externalise(
            &mut model,
            &[
                ("location", "weights.bin"),
                ("offset", offset),
                ("length", len),
            ],
        );
        let path = save(&dir, "m.onnx", &model);
        refused(&["analyze", &path, "--batch", "1"], mention);
    }
}

fn constant_node(output: &str, dims: Vec<i64>, floats: Vec<f32>) -> NodeProto {
    NodeProto {
        output: vec![output.into()],
        name: format!("make_{output}"),
        op_type: "Constant".into(),
        attribute: vec![AttributeProto {
            name: "value".into(),
            r#type: attribute_type::TENSOR,
            t: Some(TensorProto {
                dims,
                data_type: 1,
                float_data: floats,
                name: output.into(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn stored_element_counts_must_match_dims() {
    let dir = tempdir();
    // Each storage field in turn holds fewer values than its dims declare.
    for field in [
        "float_data",
        "raw_data",
        "int64_data",
        "double_data",
        "int32_data",
    ] {
        let mut model = tinycnn();
        let graph = model.graph.as_mut().unwrap();
        let init = &mut graph.initializer[0];
        let name = init.name.clone();
        init.raw_data = Default::default();
        match field {
            "float_data" => init.float_data = vec![1.0, 2.0],
            "raw_data" => init.raw_data = vec![0u8; 8].into(),
            "int64_data" => {
                init.data_type = 7;
                init.int64_data = vec![1, 2];
            }
            "double_data" => {
                init.data_type = 11;
                init.double_data = vec![1.0];
            }
            _ => {
                init.data_type = 6;
                init.int32_data = vec![3];
            }
        }
        let path = save(&dir, "m.onnx", &model);
        refused(&["analyze", &path, "--batch", "1"], &name);
        let out = dir.join("out");
        refused(
            &["run", &path, "--batch", "1", "-o", out.to_str().unwrap()],
            &name,
        );
    }
    // A Constant node declared [8] holding 2 floats (it used to panic the constant folder).
    let mut model = tinycnn();
    let graph = model.graph.as_mut().unwrap();
    graph
        .node
        .insert(0, constant_node("eight", vec![8], vec![1.0, 2.0]));
    let relu = graph.node.iter_mut().find(|n| n.op_type == "Relu").unwrap();
    relu.op_type = "Add".into();
    relu.input.push("eight".into());
    let path = save(&dir, "m.onnx", &model);
    refused(&["analyze", &path, "--batch", "1"], "holds 2 values");
}

#[test]
fn conv_bias_of_the_wrong_length_is_bad_input_everywhere() {
    let dir = tempdir();
    let mut model = tinycnn();
    let graph = model.graph.as_mut().unwrap();
    let conv = graph
        .node
        .iter()
        .find(|n| n.op_type == "Conv" && n.input.len() == 3)
        .unwrap();
    let (conv_name, bias_name) = (conv.name.clone(), conv.input[2].clone());
    let bias = graph
        .initializer
        .iter_mut()
        .find(|t| t.name == bias_name)
        .unwrap();
    bias.dims = vec![5];
    bias.raw_data = vec![0u8; 20].into();
    let path = save(&dir, "m.onnx", &model);
    let out = dir.join("out");
    for args in [
        vec!["analyze", path.as_str(), "--batch", "1"],
        vec![
            "run",
            path.as_str(),
            "--batch",
            "1",
            "-o",
            out.to_str().unwrap(),
        ],
        vec!["bench", path.as_str(), "--batch", "1", "--runs", "1"],
    ] {
        let output = run_with_deadline(&args, &[]);
        assert_refused(&output, &args, &conv_name);
        assert!(
            stderr(&output).contains("bias has shape 5"),
            "{}",
            stderr(&output)
        );
    }
}

/// Inconsistent graphs that onnxruntime's checker or session refuses: exit 2 without `--strict`.
#[test]
fn inconsistent_graphs_are_refused_without_strict() {
    let dir = tempdir();
    type Edit = fn(&mut ModelProto) -> String;
    let cases: Vec<(&str, Edit)> = vec![
        ("duplicate producer", |m| {
            let g = m.graph.as_mut().unwrap();
            let first = g.node[0].output[0].clone();
            let relu = g.node.iter_mut().find(|n| n.op_type == "Relu").unwrap();
            relu.output[0] = first.clone();
            format!("writes tensor `{first}`")
        }),
        ("node writes an initializer", |m| {
            let g = m.graph.as_mut().unwrap();
            let init = g.initializer[0].name.clone();
            g.node.last_mut().unwrap().output[0] = init.clone();
            "it is an initializer".into()
        }),
        ("too many inputs", |m| {
            let g = m.graph.as_mut().unwrap();
            let relu = g.node.iter_mut().find(|n| n.op_type == "Relu").unwrap();
            relu.input.push(relu.input[0].clone());
            "has 2 input(s); the ONNX schema (opset 14) allows 1".into()
        }),
        ("too few inputs", |m| {
            let g = m.graph.as_mut().unwrap();
            let conv = g.node.iter_mut().find(|n| n.op_type == "Conv").unwrap();
            conv.input.truncate(1);
            "allows 2 to 3".into()
        }),
        ("group = 0", |m| {
            let g = m.graph.as_mut().unwrap();
            let conv = g.node.iter_mut().find(|n| n.op_type == "Conv").unwrap();
            conv.attribute.retain(|a| a.name != "group");
            conv.attribute.push(AttributeProto {
                name: "group".into(),
                r#type: attribute_type::INT,
                i: 0,
                ..Default::default()
            });
            "group = 0".into()
        }),
        ("a cycle", |m| {
            // The first node reads the last one's output: no order puts producers first.
            let g = m.graph.as_mut().unwrap();
            let last = g.node.last().unwrap().output[0].clone();
            g.node[0].input[0] = last.clone();
            format!("reads tensor `{last}` before node")
        }),
        ("undefined input", |m| {
            let g = m.graph.as_mut().unwrap();
            let relu = g.node.iter_mut().find(|n| n.op_type == "Relu").unwrap();
            relu.input[0] = "nobody_makes_this".into();
            "`nobody_makes_this`, which no node, initializer or graph input produces".into()
        }),
        ("split sizes that do not add up", |m| {
            let g = m.graph.as_mut().unwrap();
            let flatten = g.node.iter().position(|n| n.op_type == "Flatten").unwrap();
            let source = g.node[flatten].output[0].clone();
            g.initializer.push(TensorProto {
                dims: vec![2],
                data_type: 7,
                int64_data: vec![10, 10],
                name: "sizes".into(),
                ..Default::default()
            });
            g.node.insert(
                flatten + 1,
                NodeProto {
                    input: vec![source, "sizes".into()],
                    output: vec!["part_a".into(), "part_b".into()],
                    name: "bad_split".into(),
                    op_type: "Split".into(),
                    attribute: vec![AttributeProto {
                        name: "axis".into(),
                        r#type: attribute_type::INT,
                        i: 1,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            );
            "split sizes add up to 20 but axis 1 has 32 elements".into()
        }),
        ("TopK k larger than its axis", |m| {
            let g = m.graph.as_mut().unwrap();
            let last = g.node.last().unwrap().output[0].clone();
            g.initializer.push(TensorProto {
                dims: vec![1],
                data_type: 7,
                int64_data: vec![5000],
                name: "k".into(),
                ..Default::default()
            });
            g.node.push(NodeProto {
                input: vec![last, "k".into()],
                output: vec!["top_values".into(), "top_indices".into()],
                name: "bad_topk".into(),
                op_type: "TopK".into(),
                ..Default::default()
            });
            "k = 5000 but axis 1 has only 1000 elements".into()
        }),
    ];
    for (what, edit) in cases {
        let mut model = tinycnn();
        let mention = edit(&mut model);
        let path = save(&dir, "m.onnx", &model);
        let output = run_with_deadline(&["analyze", &path, "--batch", "1"], &[]);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(&mention), "{what}: `{mention}` not in {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
}

/// The spec asks for nodes in topological order, but onnxruntime sorts what it is given and
/// exporters ship unsorted lists: reversed, the model analyses to the same ops and FLOPs and
/// runs to the same outputs as in its file's order.
#[test]
fn unsorted_node_lists_are_sorted_on_import() {
    let dir = tempdir();
    let sorted = tinycnn();
    let mut reversed = sorted.clone();
    reversed.graph.as_mut().unwrap().node.reverse();
    let paths = [
        save(&dir, "sorted.onnx", &sorted),
        save(&dir, "reversed.onnx", &reversed),
    ];
    let analyses: Vec<serde_json::Value> = paths
        .iter()
        .map(|path| {
            let output =
                run_with_deadline(&["analyze", path, "--batch", "1", "--format", "json"], &[]);
            assert!(output.status.success(), "{path}: {}", stderr(&output));
            serde_json::from_str(&stdout(&output)).unwrap()
        })
        .collect();
    let summary = |a: &serde_json::Value| {
        let nodes = a["nodes"].as_array().unwrap();
        let mut ops: Vec<(String, u64)> = nodes
            .iter()
            .map(|n| {
                (
                    n["name"].as_str().unwrap().to_string(),
                    n["flops"].as_u64().unwrap(),
                )
            })
            .collect();
        ops.sort();
        ops
    };
    assert_eq!(summary(&analyses[0]), summary(&analyses[1]));
    let outputs: Vec<Vec<u8>> = paths
        .iter()
        .enumerate()
        .map(|(k, path)| {
            let out_dir = dir.join(format!("out{k}"));
            let out = out_dir.to_str().unwrap();
            let output = run_with_deadline(&["run", path, "--batch", "1", "-o", out], &[]);
            assert!(output.status.success(), "{path}: {}", stderr(&output));
            let file = std::fs::read_dir(&out_dir)
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path();
            std::fs::read(file).unwrap()
        })
        .collect();
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn batch_that_binds_nothing_is_refused() {
    let dir = tempdir();
    let mut model = tinycnn();
    let input = &mut model.graph.as_mut().unwrap().input[0];
    let shape = match input.r#type.as_mut().unwrap().value.as_mut().unwrap() {
        roofline::analysis::onnx_proto::type_proto::Value::TensorType(t) => {
            t.shape.as_mut().unwrap()
        }
        _ => unreachable!(),
    };
    shape.dim[0].value =
        Some(roofline::analysis::onnx_proto::tensor_shape_proto::dimension::Value::DimValue(1));
    let path = save(&dir, "fixed.onnx", &model);
    refused(
        &["analyze", &path, "--batch", "8"],
        "fixes the batch of input `input` to 1",
    );
    // The batch the model already has is fine.
    let output = run_with_deadline(&["analyze", &path, "--batch", "1"], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn plan_larger_than_the_machine_is_refused_before_allocating() {
    let dir = tempdir();
    let path = save(&dir, "m.onnx", &tinycnn());
    let out = dir.join("out");
    // 2^20 images of 3 x 32 x 32, 16 x 32 x 32 floats after the first conv: about 68 GB, more
    // than this machine (24 GiB) or CI has; refused by the planner, not by the OOM killer.
    for command in ["run", "bench"] {
        refused(
            &[
                command,
                &path,
                "--batch",
                "1048576",
                "-o",
                out.join(command).to_str().unwrap(),
            ],
            "this machine can give",
        );
    }
}

#[test]
fn corrupt_or_implausible_profiles_are_errors() {
    let cache = tempdir();
    let profile_dir = cache.join("roofline");
    std::fs::create_dir_all(&profile_dir).unwrap();
    std::fs::write(profile_dir.join("local.json"), "{\"name\": \"trunc").unwrap();
    let args = ["analyze", "builtin:tinycnn", "--device", "local"];
    let output = run_with_deadline(&args, &[("XDG_CACHE_HOME", &cache)]);
    assert_refused(&output, &args, "roofline probe");
    // The corrupt file was reported, not silently replaced by a fresh probe.
    assert_eq!(
        std::fs::read_to_string(profile_dir.join("local.json")).unwrap(),
        "{\"name\": \"trunc"
    );
    // A catalogue profile edited to an impossible peak, then a zero one.
    let good = run_with_deadline(&["devices", "--json"], &[]);
    let mut profiles: serde_json::Value = serde_json::from_slice(&good.stdout).unwrap();
    let mut profile = profiles[0].take();
    profile["compute"][0]["flops_per_s"] = serde_json::json!(1e30);
    let file = cache.join("edited.json");
    std::fs::write(&file, profile.to_string()).unwrap();
    let file_arg = file.to_str().unwrap();
    refused(
        &["analyze", "builtin:tinycnn", "--device", file_arg],
        "no hardware is faster",
    );
    profile["compute"][0]["flops_per_s"] = serde_json::json!(0.0);
    std::fs::write(&file, profile.to_string()).unwrap();
    refused(
        &["analyze", "builtin:tinycnn", "--device", file_arg],
        "must be above 0",
    );
}

#[test]
fn causes_are_printed_once() {
    let args = ["analyze", "/nonexistent/dir/model.onnx"];
    let output = run_with_deadline(&args, &[]);
    let err = stderr(&output);
    assert_refused(&output, &args, "No such file");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}
