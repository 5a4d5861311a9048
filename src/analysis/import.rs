//! ONNX import: memory-map the file, decode it with prost (tensor payloads stay borrowed from the
//! map), resolve external data, and build the `Graph`.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use super::error::AnalysisError;
use super::graph::{Attr, Attributes, Graph, Node};
use super::onnx_proto::{
    self as pb, attribute_type, type_proto, GraphProto, ModelProto, TensorProto, ValueInfoProto,
};
use super::tensor::{DType, Dim, Tensor, TensorData, TensorFact};

/// Reads and decodes a model file. Tensor payloads borrow the memory map.
pub fn read_model(path: &Path) -> Result<ModelProto, AnalysisError> {
    // `stat` before `open`: opening a FIFO or a device for reading can block forever.
    let metadata = std::fs::metadata(path).map_err(|cause| AnalysisError::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    if !metadata.is_file() {
        return Err(AnalysisError::NotOnnx {
            path: path.to_path_buf(),
            reason: format!("not a regular file ({})", file_kind(&metadata)),
        });
    }
    let file = File::open(path).map_err(|cause| AnalysisError::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    let len = file
        .metadata()
        .map_err(|cause| AnalysisError::Io {
            path: path.to_path_buf(),
            cause,
        })?
        .len();
    if len == 0 {
        return Err(AnalysisError::NotOnnx {
            path: path.to_path_buf(),
            reason: "the file is empty".into(),
        });
    }
    // SAFETY: the map is read-only; a concurrent truncation of the file by another process would
    // fault, which is the accepted trade-off of every mmap-based model loader.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|cause| AnalysisError::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    decode_model(Bytes::from_owner(map), path)
}

/// Decodes a model from bytes (a memory map or a buffer built in memory).
pub fn decode_model(bytes: Bytes, path: &Path) -> Result<ModelProto, AnalysisError> {
    let model = ModelProto::decode(bytes).map_err(|err| AnalysisError::NotOnnx {
        path: path.to_path_buf(),
        reason: format!("protobuf decoding failed ({err}); the file is truncated or not ONNX"),
    })?;
    if model.graph.is_none() {
        return Err(AnalysisError::NotOnnx {
            path: path.to_path_buf(),
            reason: "no graph in the model (is this an ONNX file?)".into(),
        });
    }
    if model.ir_version <= 0 || model.ir_version > 64 {
        return Err(AnalysisError::NotOnnx {
            path: path.to_path_buf(),
            reason: format!("implausible ir_version {}", model.ir_version),
        });
    }
    Ok(model)
}

/// Loads `path` into a graph.
pub fn load_graph(path: &Path) -> Result<Graph, AnalysisError> {
    let model = read_model(path)?;
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    import_model(&model, &base_dir, path)
}

/// Builds the IR from a decoded model. `base_dir` resolves external-data locations.
pub fn import_model(
    model: &ModelProto,
    base_dir: &Path,
    path: &Path,
) -> Result<Graph, AnalysisError> {
    import_model_with(model, base_dir, path, false)
}

/// [`import_model`], where `symbolic_weights` lets an initializer that declares its shape but
/// carries no data stand for a weight whose values never matter (an opaque constant). Only the
/// built-in models built in code use it (a 70B decoder analyses without materialising 140 GB);
/// a file with such a tensor is still refused.
pub fn import_model_with(
    model: &ModelProto,
    base_dir: &Path,
    path: &Path,
    symbolic_weights: bool,
) -> Result<Graph, AnalysisError> {
    let graph_proto = model.graph.as_ref().ok_or_else(|| AnalysisError::NotOnnx {
        path: path.to_path_buf(),
        reason: "no graph".into(),
    })?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .unwrap_or(1);
    let mut external = ExternalData::new(base_dir);
    let mut graph = import_graph(graph_proto, opset, &mut external, symbolic_weights, None)?;
    graph.ir_version = model.ir_version;
    graph.producer = model.producer_name.clone();
    super::validate::validate_graph(&graph)?;
    // Opset ≤ 6 `broadcast`/`axis` operands in numpy's form, before anything reads shapes.
    super::legacy::explicit_broadcasting(&mut graph);
    graph.external_files = external.files();
    Ok(graph)
}

/// Where a subgraph's free names (values of the enclosing graphs it reads) get their facts.
pub type OuterScope<'a> = &'a dyn Fn(&str) -> Option<TensorFact>;

/// A control-flow body (`If` branch, `Loop` or `Scan` body) as a graph of its own: its formal
/// inputs are its inputs; a name it reads that neither it nor its inputs define is looked up in
/// `outer` (the enclosing graph's value of that name) and enters as a value with that fact and
/// no producer. Initializers stored in external files are not read (a body's are inline).
pub fn import_subgraph(
    proto: &GraphProto,
    opset: i64,
    outer: OuterScope,
) -> Result<Graph, AnalysisError> {
    let mut external = ExternalData::new(Path::new("."));
    let graph = import_graph(proto, opset, &mut external, false, Some(outer))?;
    super::validate::validate_graph(&graph)?;
    Ok(graph)
}

fn import_graph(
    graph_proto: &GraphProto,
    opset: i64,
    external: &mut ExternalData,
    symbolic_weights: bool,
    outer: Option<OuterScope>,
) -> Result<Graph, AnalysisError> {
    let mut graph = Graph {
        name: graph_proto.name.clone(),
        opset,
        ..Graph::default()
    };
    let mut by_name: HashMap<String, usize> = HashMap::new();

    for init in &graph_proto.initializer {
        let tensor = if symbolic_weights && carries_no_data(init) {
            symbolic_tensor(init)?
        } else {
            tensor_from_proto(init, external)?
        };
        let id = graph.add_value(init.name.clone(), TensorFact::constant(tensor));
        by_name.insert(init.name.clone(), id);
    }
    for sparse in &graph_proto.sparse_initializer {
        // Sparse weights are costed at their dense size: that is what a dense kernel reads.
        if let Some(values) = &sparse.values {
            let dims: Vec<u64> = sparse.dims.iter().map(|&d| d.max(0) as u64).collect();
            let dtype = DType::from_onnx(values.data_type).unwrap_or(DType::F32);
            let tensor = Tensor {
                dtype,
                shape: dims,
                data: TensorData::Splat(0.0),
            };
            let id = graph.add_value(values.name.clone(), TensorFact::constant(tensor));
            by_name.insert(values.name.clone(), id);
        }
    }
    for input in &graph_proto.input {
        if by_name.contains_key(&input.name) {
            // IR < 4 lists initializers among the inputs; the initializer is the value.
            continue;
        }
        let fact = fact_from_value_info(input)?.unwrap_or(TensorFact::unknown(DType::F32));
        let id = graph.add_value(input.name.clone(), fact);
        by_name.insert(input.name.clone(), id);
        graph.inputs.push(id);
    }

    // Values a node read before any producer was seen, with the first reader: in a valid (sorted)
    // graph no node ever produces one of them.
    let mut forward_refs: HashMap<usize, (String, String, String)> = HashMap::new();
    let mut parsed = graph_proto
        .node
        .iter()
        .map(|proto| attributes_from_proto(proto, opset, external).map(Some))
        .collect::<Result<Vec<_>, _>>()?;
    let order = topological_order(&graph_proto.node, &parsed);
    for index in order {
        let proto = &graph_proto.node[index];
        let attrs = parsed[index].take().unwrap_or_default();
        let node_name = if proto.name.is_empty() {
            format!(
                "{}_{}",
                proto.op_type,
                proto.output.first().cloned().unwrap_or_default()
            )
        } else {
            proto.name.clone()
        };
        let mut inputs = Vec::with_capacity(proto.input.len());
        for name in &proto.input {
            if name.is_empty() {
                inputs.push(None);
                continue;
            }
            let id = match by_name.get(name) {
                Some(&id) => id,
                None => {
                    // Undefined so far: an error once it is clear whether a later node writes it
                    // (unsorted graph) or none does (dangling input).
                    let id = graph.add_value(name.clone(), TensorFact::unknown(DType::F32));
                    by_name.insert(name.clone(), id);
                    forward_refs
                        .insert(id, (node_name.clone(), proto.op_type.clone(), name.clone()));
                    id
                }
            };
            inputs.push(Some(id));
        }
        let mut outputs = Vec::with_capacity(proto.output.len());
        for name in &proto.output {
            if name.is_empty() {
                // An optional output left out: a private value, still unnamed so that export
                // writes it back as left out.
                outputs.push(graph.add_value(String::new(), TensorFact::unknown(DType::F32)));
                continue;
            }
            let id = match by_name.get(name) {
                Some(&id) => {
                    let what = if let Some(producer) = graph.values[id].producer {
                        Some(format!(
                            "node `{}` also writes it",
                            graph.dag[producer].name
                        ))
                    } else if graph.inputs.contains(&id) {
                        Some("it is a graph input".to_string())
                    } else if graph.values[id].fact.konst.is_some() {
                        Some("it is an initializer".to_string())
                    } else if outputs.contains(&id) {
                        Some("the node lists it twice".to_string())
                    } else {
                        None
                    };
                    if let Some(what) = what {
                        return Err(AnalysisError::Node {
                            node: node_name,
                            op_type: proto.op_type.clone(),
                            reason: format!(
                                "writes tensor `{name}` but {what} (every tensor has one producer)"
                            ),
                        });
                    }
                    if let Some((reader, reader_op, _)) = forward_refs.get(&id) {
                        // Only a cycle gets here: an unsorted but acyclic list was sorted.
                        return Err(AnalysisError::Node {
                            node: reader.clone(),
                            op_type: reader_op.clone(),
                            reason: format!(
                                "reads tensor `{name}` before node `{node_name}` writes it (ONNX requires the nodes in topological order)"
                            ),
                        });
                    }
                    id
                }
                None => {
                    let id = graph.add_value(name.clone(), TensorFact::unknown(DType::F32));
                    by_name.insert(name.clone(), id);
                    id
                }
            };
            outputs.push(id);
        }
        graph.add_node(Node {
            name: node_name,
            op_type: proto.op_type.clone(),
            domain: proto.domain.clone(),
            attrs,
            inputs,
            outputs,
        });
    }
    // In a body, names no node writes are the enclosing graph's values; so are the names its
    // own nested bodies read from further out (they must exist here to be passed on).
    if let Some(outer) = outer {
        let nested: Vec<String> = graph
            .dag
            .node_indices()
            .filter(|&id| graph.dag[id].attrs.has_subgraph())
            .flat_map(|id| super::ops::control::free_names(&graph.dag[id].attrs))
            .collect();
        for name in nested {
            if by_name.contains_key(&name) {
                continue;
            }
            if let Some(fact) = outer(&name) {
                let id = graph.add_value(name.clone(), fact);
                by_name.insert(name, id);
            }
        }
        forward_refs.retain(|&id, _| {
            if graph.values[id].producer.is_some() {
                return true;
            }
            match outer(&graph.values[id].name) {
                Some(fact) => {
                    graph.values[id].fact = fact;
                    false
                }
                None => true,
            }
        });
    }
    if let Some((node, op_type, input)) = forward_refs.into_values().min() {
        return Err(AnalysisError::Node {
            node,
            op_type,
            reason: format!(
                "reads tensor `{input}`, which no node, initializer or graph input produces"
            ),
        });
    }
    for info in graph_proto.value_info.iter().chain(&graph_proto.output) {
        if let (Some(&id), Some(fact)) = (by_name.get(&info.name), fact_from_value_info(info)?) {
            graph.values[id].declared = Some(fact);
        }
    }
    for output in &graph_proto.output {
        match by_name.get(&output.name) {
            Some(&id) => graph.outputs.push(id),
            None => {
                return Err(AnalysisError::InvalidGraph {
                    reason: format!("graph output `{}` is produced by no node", output.name),
                })
            }
        }
    }
    Ok(graph)
}

/// Shape and type from a `ValueInfoProto`; `None` when it carries no tensor type. The spec has
/// no negative dims, but some exporters (Paddle's) write -1 for a dynamic one, which onnx's
/// checker and onnxruntime accept: -1 becomes a symbol whose name says so; any other negative
/// dim is an error.
/// The nodes' indices in an order where every node comes after the producers of what it reads
/// (its inputs and the names its bodies take from this graph): the file's own order when it is
/// one, else the file's order as far as the dependencies allow (Kahn's algorithm taking the
/// earliest ready node first). The spec asks for a sorted list, but onnxruntime sorts what it
/// is given, and exporters ship unsorted graphs (IS-Net's background remover reads its input's
/// Cast before the Cast node appears). A cycle keeps the file's order, and the import then
/// names the node that reads a tensor before it is written.
fn topological_order(nodes: &[pb::NodeProto], attrs: &[Option<Attributes>]) -> Vec<usize> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (index, node) in nodes.iter().enumerate() {
        for name in node.output.iter().filter(|n| !n.is_empty()) {
            producer.entry(name.as_str()).or_insert(index);
        }
    }
    let free: Vec<Vec<String>> = attrs
        .iter()
        .map(|a| {
            a.as_ref()
                .filter(|a| a.has_subgraph())
                .map(super::ops::control::free_names)
                .unwrap_or_default()
        })
        .collect();
    let depends_on: Vec<Vec<usize>> = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let mut before: Vec<usize> = node
                .input
                .iter()
                .map(String::as_str)
                .chain(free[index].iter().map(String::as_str))
                .filter_map(|name| producer.get(name).copied())
                .filter(|&p| p != index)
                .collect();
            before.sort_unstable();
            before.dedup();
            before
        })
        .collect();
    let file_order: Vec<usize> = (0..nodes.len()).collect();
    if depends_on
        .iter()
        .enumerate()
        .all(|(index, before)| before.iter().all(|&p| p < index))
    {
        return file_order;
    }
    let mut waiting: Vec<usize> = depends_on.iter().map(Vec::len).collect();
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (index, before) in depends_on.iter().enumerate() {
        for &p in before {
            readers[p].push(index);
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..nodes.len())
        .filter(|&i| waiting[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(std::cmp::Reverse(index)) = ready.pop() {
        order.push(index);
        for &reader in &readers[index] {
            waiting[reader] -= 1;
            if waiting[reader] == 0 {
                ready.push(std::cmp::Reverse(reader));
            }
        }
    }
    if order.len() == nodes.len() {
        order
    } else {
        file_order
    }
}

pub fn fact_from_value_info(info: &ValueInfoProto) -> Result<Option<TensorFact>, AnalysisError> {
    let Some(type_proto) = info.r#type.as_ref() else {
        return Ok(None);
    };
    let Some(type_proto::Value::TensorType(tensor)) = &type_proto.value else {
        return Ok(None);
    };
    let dtype = DType::from_onnx(tensor.elem_type).unwrap_or(DType::F32);
    let shape = match tensor.shape.as_ref() {
        None => None,
        Some(shape) => {
            let mut dims = Vec::with_capacity(shape.dim.len());
            for (axis, dim) in shape.dim.iter().enumerate() {
                dims.push(match &dim.value {
                    Some(pb::tensor_shape_proto::dimension::Value::DimValue(-1)) => {
                        Dim::Sym(format!("{}_dim{axis}_declared-1", info.name))
                    }
                    Some(pb::tensor_shape_proto::dimension::Value::DimValue(v)) if *v < 0 => {
                        return Err(AnalysisError::InvalidGraph {
                            reason: format!(
                                "tensor `{}` declares dim {v} on axis {axis}; dims cannot be negative (-1 is read as dynamic)",
                                info.name
                            ),
                        })
                    }
                    Some(pb::tensor_shape_proto::dimension::Value::DimValue(v)) => {
                        Dim::Known(*v as u64)
                    }
                    Some(pb::tensor_shape_proto::dimension::Value::DimParam(p))
                        if !p.is_empty() =>
                    {
                        Dim::Sym(p.clone())
                    }
                    // An anonymous dim: give it a name so the user can see and bind it.
                    _ => Dim::Sym(format!("{}_dim{}", info.name, axis)),
                });
            }
            Some(dims)
        }
    };
    Ok(Some(TensorFact {
        dtype,
        shape,
        konst: None,
    }))
}

/// What a non-regular file is, for messages.
fn file_kind(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a plain file"
    }
}

/// Opens external-data files once each and hands out zero-copy slices. Every location must
/// resolve, symlinks followed, to a regular file inside the model's own folder: a model is
/// untrusted input, and a location such as `weights -> /etc/passwd` would otherwise copy any
/// readable file into `run`'s outputs or `advise`'s written model.
struct ExternalData {
    base_dir: PathBuf,
    /// `base_dir` canonicalised once, when the first external tensor is met.
    canonical_base: Option<PathBuf>,
    maps: HashMap<PathBuf, Bytes>,
    resolved: Vec<PathBuf>,
}

impl ExternalData {
    fn new(base_dir: &Path) -> ExternalData {
        ExternalData {
            base_dir: base_dir.to_path_buf(),
            canonical_base: None,
            maps: HashMap::new(),
            resolved: Vec::new(),
        }
    }

    /// The files mapped so far, resolved.
    fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self.resolved.clone();
        files.sort();
        files.dedup();
        files
    }

    fn slice(&mut self, tensor: &TensorProto) -> Result<Bytes, AnalysisError> {
        let fail = |path: &Path, reason: String| AnalysisError::ExternalData {
            tensor: tensor.name.clone(),
            path: path.to_path_buf(),
            reason,
        };
        let mut location = None;
        let mut offset = 0u64;
        let mut length: Option<u64> = None;
        for entry in &tensor.external_data {
            let parse = |what: &str| {
                entry.value.trim().parse::<u64>().map_err(|_| {
                    fail(
                        &self.base_dir,
                        format!(
                            "{what} `{}` is not a non-negative integer",
                            entry.value.escape_debug()
                        ),
                    )
                })
            };
            match entry.key.as_str() {
                "location" => location = Some(entry.value.clone()),
                "offset" => offset = parse("offset")?,
                "length" => length = Some(parse("length")?),
                _ => {}
            }
        }
        let location = location.ok_or_else(|| fail(&self.base_dir, "no `location` key".into()))?;
        let path = self.base_dir.join(&location);
        if location.is_empty()
            || location.contains('\0')
            || Path::new(&location).is_absolute()
            || location.split(['/', '\\']).any(|p| p == "..")
        {
            return Err(fail(
                &path,
                "location must be a relative path inside the model's directory".into(),
            ));
        }
        if !self.maps.contains_key(&path) {
            let base = match &self.canonical_base {
                Some(base) => base.clone(),
                None => {
                    let dir = if self.base_dir.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        self.base_dir.as_path()
                    };
                    let base = std::fs::canonicalize(dir)
                        .map_err(|err| fail(&self.base_dir, err.to_string()))?;
                    self.canonical_base = Some(base.clone());
                    base
                }
            };
            let resolved =
                std::fs::canonicalize(&path).map_err(|err| fail(&path, err.to_string()))?;
            if !resolved.starts_with(&base) {
                return Err(fail(
                    &path,
                    format!(
                        "resolves to {}, outside the model's directory {} (symlink?)",
                        resolved.display(),
                        base.display()
                    ),
                ));
            }
            // `stat` the resolved path before opening it: a FIFO would block the open.
            let metadata =
                std::fs::metadata(&resolved).map_err(|err| fail(&path, err.to_string()))?;
            if !metadata.is_file() {
                return Err(fail(
                    &path,
                    format!("not a regular file ({})", file_kind(&metadata)),
                ));
            }
            let file = File::open(&resolved).map_err(|err| fail(&path, err.to_string()))?;
            let map = if metadata.len() == 0 {
                Bytes::new()
            } else {
                // SAFETY: read-only map, see `read_model`.
                let map = unsafe { memmap2::Mmap::map(&file) }
                    .map_err(|err| fail(&path, err.to_string()))?;
                Bytes::from_owner(map)
            };
            self.maps.insert(path.clone(), map);
            self.resolved.push(resolved);
        }
        let whole = &self.maps[&path];
        let file_len = whole.len() as u64;
        let end = match length {
            Some(len) => offset.checked_add(len),
            None => Some(file_len),
        };
        match end {
            Some(end) if offset <= file_len && end <= file_len && offset <= end => {
                Ok(whole.slice(offset as usize..end as usize))
            }
            _ => Err(fail(
                &path,
                format!(
                    "bytes {offset}..{} requested but the file holds {file_len}",
                    length.map_or("end".to_string(), |len| offset
                        .saturating_add(len)
                        .to_string())
                ),
            )),
        }
    }
}

fn carries_no_data(proto: &TensorProto) -> bool {
    proto.data_location != pb::DATA_LOCATION_EXTERNAL
        && proto.raw_data.is_empty()
        && proto.float_data.is_empty()
        && proto.int32_data.is_empty()
        && proto.int64_data.is_empty()
        && proto.double_data.is_empty()
        && proto.uint64_data.is_empty()
        && proto.string_data.is_empty()
}

/// A weight known by its type and shape only (see [`import_model_with`]).
fn symbolic_tensor(proto: &TensorProto) -> Result<Tensor, AnalysisError> {
    let dtype = DType::from_onnx(proto.data_type).ok_or_else(|| AnalysisError::InvalidGraph {
        reason: format!(
            "tensor `{}` has unknown data type {}",
            proto.name, proto.data_type
        ),
    })?;
    let shape = proto
        .dims
        .iter()
        .map(|&d| u64::try_from(d))
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| AnalysisError::InvalidGraph {
            reason: format!("tensor `{}` has a negative dim", proto.name),
        })?;
    Ok(Tensor {
        dtype,
        shape,
        data: TensorData::Opaque,
    })
}

fn tensor_from_proto(
    proto: &TensorProto,
    external: &mut ExternalData,
) -> Result<Tensor, AnalysisError> {
    let dtype = DType::from_onnx(proto.data_type).ok_or_else(|| AnalysisError::InvalidGraph {
        reason: format!(
            "tensor `{}` has unknown data type {}",
            proto.name, proto.data_type
        ),
    })?;
    let mut shape = Vec::with_capacity(proto.dims.len());
    for &d in &proto.dims {
        if d < 0 {
            return Err(AnalysisError::InvalidGraph {
                reason: format!("tensor `{}` has a negative dim {d}", proto.name),
            });
        }
        shape.push(d as u64);
    }
    let count = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| AnalysisError::AbsurdShape {
            what: format!("tensor `{}`", proto.name),
            shape: format!("{:?}", proto.dims),
        })?;
    // Every storage field must hold exactly the declared element count (the ONNX checker's
    // rule): kernels and the constant folder index by the dims, not by the stored length.
    let stored = |field: &str, len: usize, per_element: u64| -> Result<(), AnalysisError> {
        if dtype == DType::Other || (len as u64) == count.saturating_mul(per_element) {
            return Ok(());
        }
        Err(AnalysisError::InvalidGraph {
            reason: format!(
                "tensor `{}` has dims {:?} ({count} elements) but its {field} holds {len} values",
                proto.name, proto.dims
            ),
        })
    };
    let data = if proto.data_location == pb::DATA_LOCATION_EXTERNAL {
        TensorData::Raw(external.slice(proto)?)
    } else if !proto.raw_data.is_empty() {
        TensorData::Raw(proto.raw_data.clone())
    } else if !proto.float_data.is_empty() {
        stored("float_data", proto.float_data.len(), 1)?;
        TensorData::F32(proto.float_data.clone())
    } else if !proto.int64_data.is_empty() {
        stored("int64_data", proto.int64_data.len(), 1)?;
        TensorData::I64(proto.int64_data.clone())
    } else if !proto.double_data.is_empty() {
        stored("double_data", proto.double_data.len(), 1)?;
        TensorData::F64(proto.double_data.clone())
    } else if !proto.int32_data.is_empty() {
        stored("int32_data", proto.int32_data.len(), 1)?;
        // int32_data also carries int8/16, uint8/16, bool and (as bit patterns) fp16/bf16.
        match dtype {
            DType::F16 => TensorData::F32(
                proto
                    .int32_data
                    .iter()
                    .map(|&v| super::tensor::f16_to_f32(v as u16))
                    .collect(),
            ),
            DType::Bf16 => TensorData::F32(
                proto
                    .int32_data
                    .iter()
                    .map(|&v| f32::from_bits((v as u32) << 16))
                    .collect(),
            ),
            _ => TensorData::I64(proto.int32_data.iter().map(|&v| v as i64).collect()),
        }
    } else if !proto.uint64_data.is_empty() {
        stored("uint64_data", proto.uint64_data.len(), 1)?;
        TensorData::I64(proto.uint64_data.iter().map(|&v| v as i64).collect())
    } else if !proto.string_data.is_empty() {
        stored("string_data", proto.string_data.len(), 1)?;
        TensorData::Strings(proto.string_data.len())
    } else if count == 0 {
        TensorData::I64(Vec::new())
    } else {
        return Err(AnalysisError::InvalidGraph {
            reason: format!(
                "tensor `{}` declares {count} elements but carries no data",
                proto.name
            ),
        });
    };
    if let TensorData::Raw(bytes) = &data {
        let needed = count.saturating_mul(dtype.size_bytes());
        if dtype != DType::Other && dtype != DType::String && (bytes.len() as u64) != needed {
            let hint = if (bytes.len() as u64) < needed {
                " (truncated file?)"
            } else {
                ""
            };
            return Err(AnalysisError::InvalidGraph {
                reason: format!(
                    "tensor `{}` has dims {:?} and needs {needed} bytes but holds {}{hint}",
                    proto.name,
                    proto.dims,
                    bytes.len()
                ),
            });
        }
    }
    Ok(Tensor { dtype, shape, data })
}

fn attributes_from_proto(
    node: &pb::NodeProto,
    opset: i64,
    external: &mut ExternalData,
) -> Result<Attributes, AnalysisError> {
    let mut attrs = Attributes::default();
    let standard = node.domain.is_empty() || node.domain == "ai.onnx";
    let schema = standard
        .then(|| super::schema::lookup(&node.op_type, opset))
        .flatten();
    for attr in &node.attribute {
        // Very old exporters leave `type` unset: the op's schema says what the attribute is
        // (an empty list and a zero scalar look alike on the wire); without a schema, guess
        // from the populated field.
        let kind = if attr.r#type != 0 {
            attr.r#type
        } else {
            schema
                .and_then(|s| s.attribute(&attr.name))
                .map(|(kind, _)| kind.code())
                .unwrap_or_else(|| infer_attribute_type(attr))
        };
        let value = match kind {
            attribute_type::FLOAT => Attr::Float(attr.f),
            attribute_type::INT => Attr::Int(attr.i),
            attribute_type::STRING => Attr::String(String::from_utf8_lossy(&attr.s).into_owned()),
            attribute_type::TENSOR => match &attr.t {
                Some(t) => Attr::Tensor(Arc::new(tensor_from_proto(t, external)?)),
                None => continue,
            },
            attribute_type::GRAPH => match &attr.g {
                Some(g) => Attr::Graph(Arc::new(g.clone())),
                None => continue,
            },
            attribute_type::FLOATS => Attr::Floats(attr.floats.clone()),
            attribute_type::INTS => Attr::Ints(attr.ints.clone()),
            attribute_type::STRINGS => Attr::Strings(
                attr.strings
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect(),
            ),
            attribute_type::TENSORS => Attr::Tensors(attr.tensors.len()),
            attribute_type::GRAPHS => {
                Attr::Graphs(attr.graphs.iter().cloned().map(Arc::new).collect())
            }
            // Sparse tensors and type protos are not used by any op the tool costs.
            _ => continue,
        };
        attrs.0.insert(attr.name.clone(), value);
    }
    Ok(attrs)
}

/// Very old exporters leave `type` unset; guess it from which field is populated.
fn infer_attribute_type(attr: &pb::AttributeProto) -> i32 {
    if attr.t.is_some() {
        attribute_type::TENSOR
    } else if attr.g.is_some() {
        attribute_type::GRAPH
    } else if !attr.ints.is_empty() {
        attribute_type::INTS
    } else if !attr.floats.is_empty() {
        attribute_type::FLOATS
    } else if !attr.strings.is_empty() {
        attribute_type::STRINGS
    } else if !attr.s.is_empty() {
        attribute_type::STRING
    } else if attr.f != 0.0 {
        attribute_type::FLOAT
    } else {
        attribute_type::INT
    }
}

/// Number of nodes inside subgraph attributes, reported so users know what was not costed.
pub fn subgraph_node_count(graph: &GraphProto) -> usize {
    graph
        .node
        .iter()
        .map(|n| {
            1 + n
                .attribute
                .iter()
                .map(|a| {
                    a.g.as_ref().map(subgraph_node_count).unwrap_or(0)
                        + a.graphs.iter().map(subgraph_node_count).sum::<usize>()
                })
                .sum::<usize>()
        })
        .sum()
}
