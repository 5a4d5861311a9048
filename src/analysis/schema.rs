//! The ONNX operator schemas of the standard domain, one entry per op and version
//! (`schema_data.rs`, generated from the `onnx` package by `scripts/gen_onnx_schema.py`): input
//! and output counts, required inputs, attribute names and types. `validate` checks every node
//! against the version its model's opset selects, as onnxruntime's checker does.

/// The type of an attribute, as `AttributeProto.AttributeType` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Float,
    Int,
    String,
    Tensor,
    Graph,
    SparseTensor,
    TypeProto,
    Floats,
    Ints,
    Strings,
    Tensors,
    Graphs,
    SparseTensors,
    TypeProtos,
}

impl AttrKind {
    /// The `AttributeProto.AttributeType` code.
    pub fn code(self) -> i32 {
        match self {
            AttrKind::Float => 1,
            AttrKind::Int => 2,
            AttrKind::String => 3,
            AttrKind::Tensor => 4,
            AttrKind::Graph => 5,
            AttrKind::Floats => 6,
            AttrKind::Ints => 7,
            AttrKind::Strings => 8,
            AttrKind::Tensors => 9,
            AttrKind::Graphs => 10,
            AttrKind::SparseTensor => 11,
            AttrKind::SparseTensors => 12,
            AttrKind::TypeProto => 13,
            AttrKind::TypeProtos => 14,
        }
    }
}

/// One version of one operator's signature.
#[derive(Debug)]
pub struct OpSchema {
    pub name: &'static str,
    /// The opset version that introduced this signature.
    pub since: i64,
    /// (min, max) inputs, trailing optional ones counted; `u32::MAX` for variadic.
    pub inputs: (u32, u32),
    pub outputs: (u32, u32),
    /// Indices of inputs that may not be left empty.
    pub required_inputs: &'static [u32],
    /// (name, type, required), sorted by name.
    pub attributes: &'static [(&'static str, AttrKind, bool)],
    /// Per formal input: its type variable ("" for a fixed type) and the allowed element types
    /// as `TensorProto.DataType` codes (empty: not checked; 0: a type newer than the table). The
    /// last entry applies to every further input of a variadic op.
    pub input_types: &'static [(&'static str, &'static [i32])],
}

/// The signature of `op` in effect at `opset`: the latest version introduced at or before it.
pub fn lookup(op: &str, opset: i64) -> Option<&'static OpSchema> {
    versions(op)
        .filter(|s| s.since <= opset)
        .max_by_key(|s| s.since)
}

/// The oldest version of `op`, when the op exists in some opset.
pub fn first_version(op: &str) -> Option<&'static OpSchema> {
    versions(op).min_by_key(|s| s.since)
}

/// The newest version of `op`.
pub fn latest(op: &str) -> Option<&'static OpSchema> {
    versions(op).max_by_key(|s| s.since)
}

fn versions(op: &str) -> impl Iterator<Item = &'static OpSchema> + '_ {
    // The table is sorted by name: find the run of `op`'s versions by binary search.
    let table = super::schema_data::SCHEMAS;
    let start = table.partition_point(|s| s.name < op);
    table[start..].iter().take_while(move |s| s.name == op)
}

impl OpSchema {
    /// Type variable and allowed codes of input slot `index`.
    pub fn input_type(&self, index: usize) -> Option<(&'static str, &'static [i32])> {
        self.input_types
            .get(index)
            .or_else(|| {
                self.input_types
                    .last()
                    .filter(|_| self.inputs.1 == u32::MAX)
            })
            .copied()
    }

    pub fn attribute(&self, name: &str) -> Option<(AttrKind, bool)> {
        self.attributes
            .binary_search_by(|(n, _, _)| (*n).cmp(name))
            .ok()
            .map(|i| (self.attributes[i].1, self.attributes[i].2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_selected_by_opset() {
        // Conv: opset 1, 11, 22 signatures; opset 17 selects 11.
        assert_eq!(lookup("Conv", 17).unwrap().since, 11);
        assert_eq!(lookup("Conv", 1).unwrap().since, 1);
        assert_eq!(
            lookup("Conv", 99).unwrap().since,
            latest("Conv").unwrap().since
        );
        // Gelu appeared in opset 20.
        assert!(lookup("Gelu", 17).is_none());
        assert_eq!(first_version("Gelu").unwrap().since, 20);
        assert!(lookup("NoSuchOp", 17).is_none());
    }

    #[test]
    fn counts_and_attributes() {
        let conv = lookup("Conv", 17).unwrap();
        assert_eq!((conv.inputs, conv.outputs), ((2, 3), (1, 1)));
        assert_eq!(conv.required_inputs, &[0, 1]);
        assert_eq!(conv.attribute("group"), Some((AttrKind::Int, false)));
        assert_eq!(conv.attribute("groups"), None);
        let concat = lookup("Concat", 13).unwrap();
        assert_eq!(concat.inputs.1, u32::MAX);
        assert_eq!(concat.attribute("axis"), Some((AttrKind::Int, true)));
        // Loop's trip count and condition are both optional.
        assert!(lookup("Loop", 17).unwrap().required_inputs.is_empty());
    }

    #[test]
    fn the_table_is_sorted_for_binary_search() {
        let table = super::super::schema_data::SCHEMAS;
        assert!(table
            .windows(2)
            .all(|w| (w[0].name, w[0].since) < (w[1].name, w[1].since)));
        assert!(table
            .iter()
            .all(|s| s.attributes.windows(2).all(|w| w[0].0 < w[1].0)));
    }
}
