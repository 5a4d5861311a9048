//! The runtime: executes a plan's steps in order in a reusable `Workspace` (planned f32 buffers,
//! integer values by id, the shared scratch), optionally timing every step.

use std::collections::HashMap;
use std::time::Instant;

use super::cpu::{self, InRef, Io};
use super::eval;
use super::lower::Kernel;
use super::plan::{Plan, Slot, Step, StepInfo};
use super::{ExecError, RtData, RtTensor};
use crate::analysis::graph::ValueId;

/// Timing of one run.
#[derive(Clone, Debug, Default)]
pub struct RunTimings {
    /// Seconds per step, in step order.
    pub step_seconds: Vec<f64>,
}

/// Reusable run-time memory for a plan.
pub struct Workspace {
    buffers: Vec<Vec<f32>>,
    dynamic: HashMap<ValueId, RtTensor>,
    scratch: Vec<f32>,
}

impl Workspace {
    /// Reads every activation buffer once (up to the caches' capacity, the last read stays),
    /// so a run after an eviction finds them where a running model leaves them (written by
    /// the ops before) while its weights stay cold. The scratch stays cold: inside a model it
    /// was last used by an earlier convolution of the same kind, with other layers' traffic
    /// in between (a warm scratch made Winograd's transformed planes look free: F(4×4) on
    /// 64 channels at 56² measured 1.49× faster than direct, where inside ResNet-50 it ran
    /// 0.87-0.96× as fast).
    pub fn warm(&self) {
        let mut sum = 0.0f32;
        for buffer in &self.buffers {
            // One float per 64-byte line.
            sum += buffer.iter().step_by(16).sum::<f32>();
        }
        std::hint::black_box(sum);
    }
}

impl Plan {
    pub fn steps(&self) -> Vec<StepInfo> {
        self.steps.iter().map(|s| s.info.clone()).collect()
    }

    pub fn inputs(&self) -> Vec<(String, Vec<usize>, bool)> {
        self.inputs
            .iter()
            .map(|(_, n, s, i)| (n.clone(), s.clone(), *i))
            .collect()
    }

    /// Names of the graph outputs, in order.
    pub fn output_names(&self) -> Vec<String> {
        self.outputs.iter().map(|(_, name)| name.clone()).collect()
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn workspace(&self) -> Workspace {
        Workspace {
            buffers: self
                .buffer_sizes
                .iter()
                .map(|&s| crate::kernels::hugepage::zeroed(s))
                .collect(),
            dynamic: HashMap::new(),
            scratch: vec![0.0; self.scratch_len],
        }
    }

    /// Runs the plan. `inputs` by name; `timings` records per-step seconds when given (no clock
    /// is read otherwise).
    pub fn run(
        &self,
        workspace: &mut Workspace,
        inputs: &HashMap<String, RtTensor>,
        timings: Option<&mut RunTimings>,
    ) -> Result<Vec<(String, RtTensor)>, ExecError> {
        self.execute(workspace, inputs, timings)?;
        self.read_outputs(workspace)
    }

    /// The graph outputs of the last run, copied out of the workspace.
    pub fn read_outputs(
        &self,
        workspace: &Workspace,
    ) -> Result<Vec<(String, RtTensor)>, ExecError> {
        self.outputs
            .iter()
            .map(|(v, name)| {
                Ok((
                    name.clone(),
                    self.read_value(*v, workspace)
                        .ok_or_else(|| ExecError::Input {
                            name: name.clone(),
                            reason: "output was not produced".into(),
                        })?,
                ))
            })
            .collect()
    }

    /// Runs the graph, leaving its outputs in the workspace: [`Plan::stage_inputs`], then
    /// [`Plan::run_staged`]. Copying the outputs out is the caller's cost, and for a decoder
    /// whose outputs hold the whole KV cache it would dwarf the step (fresh pages every run).
    pub fn execute(
        &self,
        workspace: &mut Workspace,
        inputs: &HashMap<String, RtTensor>,
        timings: Option<&mut RunTimings>,
    ) -> Result<(), ExecError> {
        self.stage_inputs(workspace, inputs)?;
        self.run_staged(workspace, timings)
    }

    /// Copies the inputs into their workspace slots, checking names, shapes and types. A run
    /// may reuse an input's slot once the input is read for the last time, so every run needs
    /// its inputs staged again.
    pub fn stage_inputs(
        &self,
        workspace: &mut Workspace,
        inputs: &HashMap<String, RtTensor>,
    ) -> Result<(), ExecError> {
        self.stage(workspace, inputs, true)
    }

    /// [`Plan::stage_inputs`] for the inputs `inputs` holds only: the others must already be in
    /// their slots ([`Plan::output_into_input`] put them there).
    pub fn stage_given_inputs(
        &self,
        workspace: &mut Workspace,
        inputs: &HashMap<String, RtTensor>,
    ) -> Result<(), ExecError> {
        self.stage(workspace, inputs, false)
    }

    fn stage(
        &self,
        workspace: &mut Workspace,
        inputs: &HashMap<String, RtTensor>,
        require_all: bool,
    ) -> Result<(), ExecError> {
        self.stage_by(workspace, |name| inputs.get(name), require_all)
    }

    /// [`Plan::stage_inputs`] (`require_all`) or [`Plan::stage_given_inputs`] with the inputs
    /// found by `lookup`: a control-flow body's feeds live in its caller's values, and a map of
    /// copies of them per loop iteration cost more than a small body's steps.
    pub fn stage_by<'t>(
        &self,
        workspace: &mut Workspace,
        lookup: impl Fn(&str) -> Option<&'t RtTensor>,
        require_all: bool,
    ) -> Result<(), ExecError> {
        for (v, name, shape, integer) in &self.inputs {
            let Some(tensor) = lookup(name) else {
                if !require_all {
                    continue;
                }
                return Err(ExecError::Input {
                    name: name.clone(),
                    reason: "no value given".into(),
                });
            };
            if &tensor.shape != shape {
                return Err(ExecError::Input {
                    name: name.clone(),
                    reason: format!("shape {:?} given, {:?} expected", tensor.shape, shape),
                });
            }
            match (&self.slots[*v], &tensor.data, integer) {
                (Slot::Buffer { buffer, offset, .. }, RtData::F32(data), false) => {
                    workspace.buffers[*buffer][*offset..*offset + data.len()].copy_from_slice(data)
                }
                (Slot::Dynamic { .. }, RtData::I64(_), true) => {
                    workspace.dynamic.insert(*v, tensor.clone());
                }
                (Slot::Dynamic { .. }, RtData::F32(data), true) => {
                    workspace.dynamic.insert(
                        *v,
                        RtTensor {
                            shape: shape.clone(),
                            data: RtData::I64(data.iter().map(|&f| f as i64).collect()),
                        },
                    );
                }
                _ => {
                    return Err(ExecError::Input {
                        name: name.clone(),
                        reason: "wrong element type".into(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Runs the steps over inputs already staged ([`Plan::stage_inputs`]): what the timed runs
    /// of `bench` and `advise` measure. The inputs' copy stays outside, as it does in a runtime
    /// that reads inputs where the caller put them (a decoder's 2 MB of KV cache took 40-80 µs
    /// of a 0.4 ms step to copy).
    pub fn run_staged(
        &self,
        workspace: &mut Workspace,
        mut timings: Option<&mut RunTimings>,
    ) -> Result<(), ExecError> {
        if let Some(t) = timings.as_deref_mut() {
            t.step_seconds.clear();
            t.step_seconds.resize(self.steps.len(), 0.0);
        }
        for (i, step) in self.steps.iter().enumerate() {
            let start = timings.is_some().then(Instant::now);
            self.run_step(step, workspace)?;
            if let (Some(t), Some(start)) = (timings.as_deref_mut(), start) {
                t.step_seconds[i] = start.elapsed().as_secs_f64();
            }
        }
        Ok(())
    }

    /// One graph output of the last run, copied out of the workspace.
    pub fn read_output(&self, workspace: &Workspace, name: &str) -> Option<RtTensor> {
        let (value, _) = self.outputs.iter().find(|(_, n)| n == name)?;
        self.read_value(*value, workspace)
    }

    /// Lets `fill` write float input `input`'s slot from float output `output` of the last run,
    /// inside the workspace: a decoder's `present` cache becomes the next step's `past` with no
    /// copy out and back in (fresh pages every step would also push the weights out of the
    /// caches between steps, which an in-place serving cache does not). The input is then
    /// staged: leave it out of what [`Plan::stage_given_inputs`] copies.
    pub fn output_into_input(
        &self,
        workspace: &mut Workspace,
        output: &str,
        input: &str,
        fill: impl FnOnce(&[f32], &mut [f32]),
    ) -> Result<(), ExecError> {
        let missing = |name: &str, reason: &str| ExecError::Input {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        let (out_value, _) = self
            .outputs
            .iter()
            .find(|(_, n)| n == output)
            .ok_or_else(|| missing(output, "no such output"))?;
        let (in_value, ..) = self
            .inputs
            .iter()
            .find(|(_, n, ..)| n == input)
            .ok_or_else(|| missing(input, "no such input"))?;
        let (src_buffer, src_offset, src_len) = self
            .buffer_slot(*out_value)
            .ok_or_else(|| missing(output, "not a float buffer"))?;
        let (dst_buffer, dst_offset, dst_len) = self
            .buffer_slot(*in_value)
            .ok_or_else(|| missing(input, "not a float buffer"))?;
        let src_range = src_offset..src_offset + src_len;
        let dst_range = dst_offset..dst_offset + dst_len;
        if src_buffer != dst_buffer {
            let (src, dst) = if src_buffer < dst_buffer {
                let (low, high) = workspace.buffers.split_at_mut(dst_buffer);
                (&low[src_buffer][src_range], &mut high[0][dst_range])
            } else {
                let (low, high) = workspace.buffers.split_at_mut(src_buffer);
                (&high[0][src_range], &mut low[dst_buffer][dst_range])
            };
            fill(src, dst);
        } else if src_range.end <= dst_range.start || dst_range.end <= src_range.start {
            let buffer = &mut workspace.buffers[src_buffer];
            if src_range.end <= dst_range.start {
                let (low, high) = buffer.split_at_mut(dst_range.start);
                fill(&low[src_range], &mut high[..dst_len]);
            } else {
                let (low, high) = buffer.split_at_mut(src_range.start);
                fill(&high[..src_len], &mut low[dst_range]);
            }
        } else {
            // The slots overlap (the input's slot reused for the output): through a copy.
            let source = workspace.buffers[src_buffer][src_range].to_vec();
            fill(&source, &mut workspace.buffers[dst_buffer][dst_range]);
        }
        Ok(())
    }

    /// (buffer, offset, length) of a value held in a planned float buffer.
    fn buffer_slot(&self, value: ValueId) -> Option<(usize, usize, usize)> {
        match &self.slots[value] {
            Slot::Buffer {
                buffer,
                offset,
                shape,
            } => Some((*buffer, *offset, shape.iter().product::<usize>())),
            _ => None,
        }
    }

    /// Whether writing input `input`'s slot after a run can overwrite output `output` (the
    /// planner may give an output the buffer an input no longer needs); unknown names: true.
    pub fn input_overlaps_output(&self, input: &str, output: &str) -> bool {
        let input = self.inputs.iter().find(|(_, n, ..)| n == input);
        let output = self.outputs.iter().find(|(_, n)| n == output);
        let (Some((in_value, ..)), Some((out_value, _))) = (input, output) else {
            return true;
        };
        match (self.buffer_slot(*in_value), self.buffer_slot(*out_value)) {
            (Some((a, a_start, a_len)), Some((b, b_start, b_len))) => {
                a == b && a_start < b_start + b_len && b_start < a_start + a_len
            }
            _ => true,
        }
    }

    fn read_value(&self, v: ValueId, ws: &Workspace) -> Option<RtTensor> {
        match &self.slots[v] {
            Slot::Const(t) => Some((**t).clone()),
            Slot::Buffer {
                buffer,
                offset,
                shape,
            } => {
                let len: usize = shape.iter().product();
                Some(RtTensor {
                    shape: shape.clone(),
                    data: RtData::F32(ws.buffers[*buffer][*offset..*offset + len].to_vec()),
                })
            }
            Slot::Dynamic { .. } => ws.dynamic.get(&v).cloned(),
            Slot::Unused => None,
        }
    }

    fn run_step(&self, step: &Step, ws: &mut Workspace) -> Result<(), ExecError> {
        let node_err = |reason: String| ExecError::Node {
            node: step.info.name.clone(),
            op_type: step.info.op_type.clone(),
            reason,
        };
        if matches!(step.kernel, Kernel::InPlace | Kernel::SliceView) {
            // The inputs' producers wrote them where the output keeps them, or the outputs
            // are runs of the input.
            return Ok(());
        }
        if matches!(step.kernel, Kernel::View) {
            // The data output shares the input's buffer; a Dropout mask (inference) is all ones.
            for &v in step.outputs.iter().skip(1) {
                if let Slot::Dynamic { shape } = &self.slots[v] {
                    let ones = RtTensor {
                        shape: shape.clone(),
                        data: RtData::I64(vec![1; shape.iter().product()]),
                    };
                    ws.dynamic.insert(v, ones);
                }
            }
            return Ok(());
        }
        if matches!(step.kernel, Kernel::Generic) {
            // Constants and integer values are lent as they are (a quantized layer's weights
            // are megabytes); only activations held in the float arena are copied out.
            let copied: Vec<Option<RtTensor>> = step
                .inputs
                .iter()
                .map(|s| {
                    s.filter(|&v| matches!(self.slots[v], Slot::Buffer { .. }))
                        .and_then(|v| self.read_value(v, ws))
                })
                .collect();
            let ins: Vec<Option<&RtTensor>> = step
                .inputs
                .iter()
                .zip(&copied)
                .map(|(s, copy)| {
                    copy.as_ref().or_else(|| {
                        s.and_then(|v| match &self.slots[v] {
                            Slot::Const(t) => Some(&**t),
                            Slot::Dynamic { .. } => ws.dynamic.get(&v),
                            _ => None,
                        })
                    })
                })
                .collect();
            let (node, in_types, out_types, prepared) = self
                .generic_nodes
                .get(&step.node)
                .ok_or_else(|| node_err("internal: node missing".into()))?;
            let outs = match prepared {
                Some(prepared) => {
                    super::reference::run_prepared(node, prepared, &ins, out_types, self.threads)
                        .map_err(node_err)?
                }
                None => eval::generic_eval(node, self.opset, &ins, in_types, out_types)?,
            };
            for (&v, t) in step.outputs.iter().zip(outs) {
                self.store(v, t, ws)?;
            }
            return Ok(());
        }
        // The previous run's integer outputs of this step, for the kernel to write into again.
        let mut spare_integers: Vec<Vec<i64>> = Vec::new();
        for &v in &step.outputs {
            if matches!(self.slots[v], Slot::Dynamic { .. }) {
                if let Some(RtTensor {
                    data: RtData::I64(values),
                    ..
                }) = ws.dynamic.remove(&v)
                {
                    spare_integers.push(values);
                }
            }
        }
        // Take the output buffers out so inputs can be borrowed from the rest.
        let mut taken: Vec<(usize, Vec<f32>)> = Vec::new();
        for &v in &step.outputs {
            if let Slot::Buffer { buffer, .. } = &self.slots[v] {
                if !taken.iter().any(|(b, _)| b == buffer) {
                    taken.push((*buffer, std::mem::take(&mut ws.buffers[*buffer])));
                }
            }
        }
        let result = {
            let ins: Vec<Option<InRef>> = step
                .inputs
                .iter()
                .map(|s| {
                    s.and_then(|v| match &self.slots[v] {
                        Slot::Const(t) => Some(InRef::from_tensor(t)),
                        Slot::Buffer {
                            buffer,
                            offset,
                            shape,
                        } => Some(InRef::F32(
                            &ws.buffers[*buffer]
                                [*offset..*offset + shape.iter().product::<usize>()],
                        )),
                        Slot::Dynamic { .. } => ws.dynamic.get(&v).map(InRef::from_tensor),
                        Slot::Unused => None,
                    })
                })
                .collect();

            let mut outs: Vec<&mut [f32]> = Vec::new();
            // Hand out disjoint mutable slices of the taken buffers, in output order.
            let mut pool: Vec<(usize, &mut [f32])> = taken
                .iter_mut()
                .map(|(b, v)| (*b, v.as_mut_slice()))
                .collect();
            for &v in &step.outputs {
                match &self.slots[v] {
                    Slot::Buffer {
                        buffer,
                        offset,
                        shape,
                    } => {
                        let len: usize = shape.iter().product();
                        let at = pool.iter().position(|(b, _)| b == buffer);
                        match at {
                            Some(at) => {
                                let (_, slice) = pool.swap_remove(at);
                                outs.push(&mut slice[*offset..*offset + len]);
                            }
                            None => outs.push(&mut []),
                        }
                    }
                    _ => outs.push(&mut []),
                }
            }
            let mut dynamic_out = Vec::new();
            let r = cpu::run(
                step,
                &mut Io {
                    ins: &ins,
                    outs: &mut outs,
                    dynamic_out: &mut dynamic_out,
                    scratch: &mut ws.scratch,
                    spare_integers: &mut spare_integers,
                    threads: self.threads,
                },
            );
            r.map(|()| dynamic_out)
        };
        for (b, v) in taken {
            ws.buffers[b] = v;
        }
        let dynamic_out = result.map_err(node_err)?;
        for (&v, t) in step.outputs.iter().zip(dynamic_out) {
            let shape = match &self.slots[v] {
                Slot::Dynamic { shape } => shape.clone(),
                _ => t.shape.clone(),
            };
            self.store(v, RtTensor { shape, ..t }, ws)?;
        }
        Ok(())
    }

    /// Stores a generic step's output; one whose size disagrees with the planned shape (a
    /// reference kernel and shape inference reading the spec differently) is an error.
    fn store(&self, v: ValueId, t: RtTensor, ws: &mut Workspace) -> Result<(), ExecError> {
        match &self.slots[v] {
            Slot::Buffer {
                buffer,
                offset,
                shape,
            } => {
                let data = t.to_f32();
                if data.len() != shape.iter().product::<usize>() {
                    return Err(ExecError::Input {
                        name: self.value_name(v).to_string(),
                        reason: format!(
                            "computed with shape {:?}, but planned as {shape:?}",
                            t.shape
                        ),
                    });
                }
                ws.buffers[*buffer][*offset..*offset + data.len()].copy_from_slice(&data);
            }
            Slot::Dynamic { shape } if t.len() != shape.iter().product::<usize>() => {
                return Err(ExecError::Input {
                    name: self.value_name(v).to_string(),
                    reason: format!(
                        "computed with shape {:?}, but planned as {shape:?}",
                        t.shape
                    ),
                });
            }
            _ => {
                ws.dynamic.insert(v, t);
            }
        }
        Ok(())
    }

    /// Name of a value (diagnostics).
    pub fn value_name(&self, v: ValueId) -> &str {
        &self.graph_names[v]
    }
}
