// trainscope/common/safetensors.h — the safetensors file format (Hugging Face), read and written.
//
// A file is: 8 bytes, little-endian u64 N; N bytes of JSON header; the tensors' bytes. The header
// maps each tensor name to {"dtype": "F32"|"BF16"|…, "shape": [..], "data_offsets": [begin, end]}
// (offsets into the bytes after the header, end exclusive), plus an optional "__metadata__" object
// of string values. Tensors are row-major, little-endian, laid end to end without gaps.
//
// A model too big for one file is split into shards model-00001-of-0000K.safetensors … with an
// index, model.safetensors.index.json: {"metadata": {"total_size": bytes}, "weight_map": {name: file}}
// — the layout transformers' save_pretrained writes and from_pretrained reads.
//
// No LibTorch here: tensors are (dtype, shape, bytes). Errors are UserErrors naming `field` (the
// flag that named the file or folder).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainscope::safetensors {

// One tensor to write: its bytes are read from `data` (not owned) while writing.
struct TensorView {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t nbytes = 0;
};

// One tensor read back (its bytes owned).
struct Tensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
  int64_t numel() const;
};

// Bytes per element of a safetensors dtype ("F32" 4, "BF16" 2, "I64" 8, …); 0 for an unknown one.
int64_t dtypeSize(const std::string& dtype);

// The header (the 8-byte length and the JSON, padded with spaces to a multiple of 8 bytes, as the
// reference writer does) for `tensors` in their order. Throws std::invalid_argument when a tensor's
// byte count does not match its dtype and shape.
std::string header(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata);

// Writes one file at `path` (a new file: fails if anything is there), fsynced. Returns its bytes.
int64_t writeFile(const std::string& path, const std::vector<TensorView>& tensors,
                  const std::map<std::string, std::string>& metadata, const std::string& field);

// Writes `tensors` into the folder `dir` (which must exist and be ours: nothing is replaced) as
// model.safetensors, or, when they hold more than `max_shard_bytes`, as shards and their index.
// Returns the bytes written (files and index).
int64_t writeModel(const std::string& dir, const std::vector<TensorView>& tensors,
                   const std::map<std::string, std::string>& metadata, int64_t max_shard_bytes,
                   const std::string& field);

// Reads one safetensors file whole; checks the header (offsets in range, contiguous, matching the
// dtype and shape). `metadata` receives __metadata__ when given.
std::map<std::string, Tensor> readFile(const std::string& path, const std::string& field,
                                       std::map<std::string, std::string>* metadata = nullptr);

// Reads a model folder: model.safetensors, or the shards an index names.
std::map<std::string, Tensor> readModel(const std::string& dir, const std::string& field);

}  // namespace trainscope::safetensors
