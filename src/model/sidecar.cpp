// A model's sidecar GGUF files (model/sidecar.h): the path rule, the header, the checks on reading
// and the model's search for its sidecar.
#include "model/sidecar.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <system_error>

#include "snapkv/util/error.h"
#include "snapkv/util/sha256.h"
#include "snapkv/util/text.h"

namespace snapkv::sidecar {
namespace {

constexpr const char* kComponent = "kv";

std::string key(const Kind& kind, const char* name) {
  return std::string(kind.arch) + "." + name;
}

}  // namespace

std::string path_for(const std::string& model_path, std::string_view suffix) {
  constexpr std::string_view ext = ".gguf";
  if (model_path.size() > ext.size() &&
      model_path.compare(model_path.size() - ext.size(), ext.size(), ext) == 0) {
    return model_path.substr(0, model_path.size() - ext.size()) + std::string(suffix);
  }
  return model_path + std::string(suffix);
}

std::string dims_text(const std::vector<Dim>& dims) {
  std::string text;
  for (const Dim& d : dims) {
    if (!text.empty()) text += " x ";
    text += d.before + num(d.value) + d.after;
  }
  return text;
}

gguf::Writer header(const Kind& kind, const char* name, const std::array<uint8_t, 32>& fingerprint,
                    const std::vector<Dim>& dims) {
  gguf::Writer w;
  w.set_string("general.architecture", kind.arch);
  w.set_string("general.name", name);
  w.set_u32(key(kind, "version"), kind.version);
  w.set_string(key(kind, "model_fingerprint"), to_hex(fingerprint));
  for (const Dim& d : dims) w.set_u32(key(kind, d.key), static_cast<uint32_t>(d.value));
  return w;
}

Reader::Reader(const gguf::File& file, const std::string& path, const Kind& kind,
               const std::array<uint8_t, 32>& fingerprint, const std::vector<Dim>& dims)
    : file_(file), kind_(kind), where_(std::string(kind.label) + " " + path) {
  const std::string arch = file.get_string_or("general.architecture", "");
  if (arch != kind.arch) {
    throw_runtime(kComponent, where_ + ": not a " + kind.not_this,
                  "general.architecture '" + arch + "'", "'" + std::string(kind.arch) + "'");
  }
  const uint32_t version = u32("version");
  if (version != kind.version) {
    throw_runtime(kComponent, where_ + ": unknown version", num(version), num(kind.version));
  }
  const std::string& got = file.get_string(key(kind, "model_fingerprint"));
  const std::string want = to_hex(fingerprint);
  if (got != want) {
    throw_runtime(kComponent, where_ + " " + kind.other_model + ": fingerprint differs",
                  got.substr(0, 16) + "...", want.substr(0, 16) + "... (" + kind.remake + ")");
  }
  std::vector<Dim> in = dims;
  bool same = true;
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].value = u32(in[i].key);
    same = same && in[i].value == dims[i].value;
  }
  if (!same) {
    throw_runtime(kComponent, where_ + ": dimensions differ from the model's", dims_text(in),
                  dims_text(dims));
  }
}

std::vector<float> Reader::f32(const char* name, const std::vector<int64_t>& shape) const {
  const gguf::TensorInfo& t = file_.get_tensor(name);
  if (t.type != gguf::TensorType::f32) {
    throw_runtime(kComponent, where_ + ": tensor " + std::string(name) + " type", "not f32", "f32");
  }
  gguf::check_shape(t, shape);
  size_t n = 1;
  for (const int64_t d : shape) n *= static_cast<size_t>(d);
  std::vector<float> values(n);
  if (n > 0) std::memcpy(values.data(), t.data, n * sizeof(float));
  return values;
}

uint32_t Reader::u32(const char* name) const {
  return file_.get_u32(key(kind_, name));
}

std::string find(const std::string& model_path, const Kind& kind,
                 const std::function<void(const std::string& path)>& load) {
  const char* env = std::getenv(kind.env);
  const bool from_env = env != nullptr && *env != '\0';
  const std::string path = from_env ? std::string(env) : path_for(model_path, kind.suffix);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return std::string(kind.none) + " (" + (from_env ? std::string(kind.env) + " names " : "") +
           path + ", absent)";
  }
  try {
    load(path);
  } catch (const std::exception& e) {
    // Other methods must still work with this model: the reason is reported when it is needed.
    return e.what();
  }
  return "";
}

}  // namespace snapkv::sidecar
