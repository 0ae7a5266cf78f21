// safetensors.cpp — see safetensors.h. Written from the format's description; no code copied.
#include "trainscope/common/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"

namespace trainscope::safetensors {
namespace {

constexpr int64_t kMaxHeader = int64_t(100) << 20;  // the reference reader's limit (100 MB)

void writeAll(int fd, const void* data, int64_t n, const std::string& path, const std::string& field) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, size_t(std::min<int64_t>(n, int64_t(1) << 30)));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      throw UserError(field, "could not write " + path + ": " + std::strerror(errno), "check the disk's free space");
    p += w;
    n -= w;
  }
}

void readAll(int fd, void* data, int64_t n, const std::string& path, const std::string& field) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, size_t(std::min<int64_t>(n, int64_t(1) << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw UserError(field, path + " is shorter than its safetensors header says", "the file is truncated");
    p += r;
    n -= r;
  }
}

std::string shardName(int i, int n) {
  char b[64];
  std::snprintf(b, sizeof(b), "model-%05d-of-%05d.safetensors", i, n);
  return b;
}

}  // namespace

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t dtypeSize(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

std::string header(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps the tensors in file order (readers do not need it; people do).
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const TensorView& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (dtypeSize(t.dtype) == 0 || numel * dtypeSize(t.dtype) != t.nbytes)
      throw std::invalid_argument("safetensors: tensor " + t.name + " holds " + std::to_string(t.nbytes) +
                                  " bytes, not what its dtype and shape make");
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + text;
}

int64_t writeFile(const std::string& path, const std::vector<TensorView>& tensors,
                  const std::map<std::string, std::string>& metadata, const std::string& field) {
  const std::string head = header(tensors, metadata);
  // A new file (O_EXCL, never through a link): the caller writes into a folder of its own.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(field, "could not create " + path + ": " + std::strerror(errno), "check the folder");
  int64_t total = int64_t(head.size());
  try {
    writeAll(fd, head.data(), int64_t(head.size()), path, field);
    for (const TensorView& t : tensors) {
      writeAll(fd, t.data, t.nbytes, path, field);
      total += t.nbytes;
    }
    if (::fsync(fd) != 0)
      throw UserError(field, "could not sync " + path + ": " + std::strerror(errno), "check the disk");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return total;
}

int64_t writeModel(const std::string& dir, const std::vector<TensorView>& tensors,
                   const std::map<std::string, std::string>& metadata, int64_t max_shard_bytes,
                   const std::string& field) {
  // Shards in order, each closed before the next tensor would pass the limit (a tensor bigger than
  // the limit has a shard of its own), as transformers splits them.
  std::vector<std::vector<TensorView>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const TensorView& t : tensors) {
    if (!shards.back().empty() && max_shard_bytes > 0 && in_shard + t.nbytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += t.nbytes;
    total += t.nbytes;
  }
  if (shards.size() == 1) return writeFile(dir + "/model.safetensors", tensors, metadata, field);
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  int64_t bytes = 0;
  const int n = int(shards.size());
  for (int i = 0; i < n; ++i) {
    const std::string name = shardName(i + 1, n);
    bytes += writeFile(dir + "/" + name, shards[size_t(i)], metadata, field);
    for (const TensorView& t : shards[size_t(i)]) map[t.name] = name;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  const std::string text = index.dump(2) + "\n";
  const std::string path = dir + "/model.safetensors.index.json";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(field, "could not create " + path + ": " + std::strerror(errno), "check the folder");
  try {
    writeAll(fd, text.data(), int64_t(text.size()), path, field);
    ::fsync(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes + int64_t(text.size());
}

std::map<std::string, Tensor> readFile(const std::string& path, const std::string& field,
                                       std::map<std::string, std::string>* metadata) {
  const std::string fix = "pass a checkpoint folder written by `trainscope run --save` or transformers' save_pretrained";
  const int fd = files::openRegularFile(path, field, fix);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t size = st.st_size;
  auto bad = [&](const std::string& what) { return UserError(field, path + " is not a safetensors file: " + what, fix); };
  if (size < 8) throw bad("shorter than its 8-byte header length");
  unsigned char len[8];
  readAll(fd, len, 8, path, field);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > uint64_t(kMaxHeader) || int64_t(n) > size - 8) throw bad("its header length " + std::to_string(n) + " is past the file");
  std::string text(size_t(n), '\0');
  readAll(fd, text.data(), int64_t(n), path, field);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw bad("its header is not JSON");
  }
  if (!j.is_object()) throw bad("its header is not a JSON object");
  const int64_t data_size = size - 8 - int64_t(n);
  std::map<std::string, Tensor> out;
  // Offsets are checked to tile [0, data_size) exactly: sorted by begin, each starts where the last ended.
  std::vector<std::pair<int64_t, std::string>> order;
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw bad("__metadata__ is not an object");
      if (metadata)
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) (*metadata)[m.key()] = m->get<std::string>();
      continue;
    }
    const nlohmann::json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      throw bad("tensor \"" + it.key() + "\" lacks dtype, shape or data_offsets");
    Tensor t;
    t.dtype = e["dtype"].get<std::string>();
    if (dtypeSize(t.dtype) == 0) throw bad("tensor \"" + it.key() + "\" has the unknown dtype " + t.dtype);
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) throw bad("tensor \"" + it.key() + "\" has a bad shape");
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& o = e["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned()) throw bad("tensor \"" + it.key() + "\" has bad offsets");
    const int64_t b = o[0].get<int64_t>(), en = o[1].get<int64_t>();
    double numel = 1;
    for (int64_t d : t.shape) numel *= double(d);
    if (b < 0 || en < b || en > data_size || double(en - b) != numel * double(dtypeSize(t.dtype)))
      throw bad("tensor \"" + it.key() + "\"'s data_offsets do not match its dtype and shape or pass the file's end");
    ranges[it.key()] = {b, en};
    order.emplace_back(b, it.key());
    out.emplace(it.key(), std::move(t));
  }
  std::sort(order.begin(), order.end());
  int64_t at = 0;
  for (const auto& [b, name] : order) {
    if (b != at) throw bad("tensor \"" + name + "\" does not start where the previous one ended");
    at = ranges[name].second;
  }
  if (at != data_size) throw bad("its tensors do not cover the file's data");
  for (const auto& [b, name] : order) {
    Tensor& t = out[name];
    t.bytes.resize(size_t(ranges[name].second - b));
    readAll(fd, t.bytes.data(), int64_t(t.bytes.size()), path, field);
  }
  return out;
}

std::map<std::string, Tensor> readModel(const std::string& dir, const std::string& field) {
  const std::string index = dir + "/model.safetensors.index.json";
  struct stat st {};
  if (::stat(index.c_str(), &st) != 0) {
    // Older Hub checkpoints hold only PyTorch's pickled weights; say so rather than "does not exist".
    if (::stat((dir + "/model.safetensors").c_str(), &st) != 0)
      for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
        if (::stat((dir + "/" + pickle).c_str(), &st) == 0)
          throw UserError(field,
                          dir + " holds " + pickle + " (PyTorch's pickle format) and no model.safetensors: trainscope "
                                "reads safetensors only",
                          "convert it with transformers: AutoModelForCausalLM.from_pretrained(DIR)"
                          ".save_pretrained(NEW_DIR) writes model.safetensors, then pass NEW_DIR");
    return readFile(dir + "/model.safetensors", field);
  }
  const std::string fix = "pass a checkpoint folder written by `trainscope run --save` or transformers' save_pretrained";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(files::readTextFile(index, field, fix));
  } catch (const nlohmann::json::exception&) {
    throw UserError(field, index + " is not JSON", fix);
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw UserError(field, index + " has no weight_map object", fix);
  std::map<std::string, std::string> wanted;  // tensor -> file
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) throw UserError(field, index + ": weight_map." + it.key() + " is not a file name", fix);
    const std::string f = it->get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw UserError(field, index + ": weight_map." + it.key() + " names \"" + f + "\", not a file in the folder", fix);
    wanted[it.key()] = f;
  }
  std::map<std::string, std::map<std::string, Tensor>> by_file;
  std::map<std::string, Tensor> out;
  for (const auto& [name, f] : wanted) {
    if (!by_file.count(f)) by_file[f] = readFile(dir + "/" + f, field);
    auto& tensors = by_file[f];
    auto t = tensors.find(name);
    if (t == tensors.end()) throw UserError(field, index + " puts " + name + " in " + f + ", which does not hold it", fix);
    out[name] = std::move(t->second);
  }
  return out;
}

}  // namespace trainscope::safetensors
