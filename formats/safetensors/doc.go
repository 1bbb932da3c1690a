// Package safetensors reads and writes the safetensors tensor-file format,
// the format Python tools (huggingface safetensors, PyTorch via that library)
// exchange weights in.
//
// Layout of a file:
//
//	[8 bytes]  N, the header length, unsigned little-endian
//	[N bytes]  JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]}}
//	           plus an optional "__metadata__": {string: string}; padded with
//	           spaces so that the data section starts at a multiple of 8
//	[rest]     raw little-endian tensor bytes; offsets are relative to the
//	           start of this section
//
// Semantics a user must know:
//   - Reading is strict, like the reference implementation: every tensor's
//     byte span must equal numel × dtype size, spans must tile the data
//     section exactly (no overlap, no hole, nothing left over), names must be
//     unique and non-empty, and dimensions non-negative. A malformed file is
//     an error naming the tensor and the rule broken; nothing panics.
//   - Writing is deterministic: tensors are laid out in byte-wise sorted name
//     order and the header's keys are sorted, so equal contents give equal
//     files.
//   - Tensor.Data aliases the buffer the file was read into; copy it before
//     mutating if the File is shared.
//   - F16 and BF16 convert to float32 exactly; converting float32 to them
//     rounds to nearest, ties to even.
package safetensors
