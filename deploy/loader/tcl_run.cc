// tcl-run: load a tcl-tuned artifact (model.so + manifest.json) with the TVM runtime alone, run it
// on inputs read from .npy files, write its outputs as .npy files and report the median latency.
//
//   tcl-run ARTIFACT_DIR [--inputs a.npy b.npy ...] [--outputs DIR] [--repeat N]
//
// Without --inputs the inputs are drawn from N(0, 1) (floats) or set to zero (integers), shaped as
// the manifest says. Prints one JSON line: {"outputs": [...], "median_ms": ..., "threads": ...}.
// Errors print one line "error: ..." on stderr and exit 1.
//
// Build (C++17; headers from the tvm_ffi wheel only, since the tvm wheel's runtime headers include
// files it does not ship): see examples/cpp/Makefile. libtvm_runtime.so must be linked with
// -Wl,--no-as-needed: nothing here calls it by name, but its static initialisers register the
// Relax VM loader ("relax.VMExecutable") that model.so needs.

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;

namespace {

struct CpuAlloc {
  void AllocData(DLTensor* tensor) {
    tensor->data = std::aligned_alloc(64, (ffi::GetDataSize(*tensor) + 63) / 64 * 64);
    if (tensor->data == nullptr) throw std::runtime_error("out of memory");
  }
  void FreeData(DLTensor* tensor) { std::free(tensor->data); }
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // TVM's spelling: float32, int64, ...
};

[[noreturn]] void Fail(const std::string& message) { throw std::runtime_error(message); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot read " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// ---- .npy (format 1.0-3.0, little-endian, C order) ----

// numpy's descr <-> TVM's dtype name, for the dtypes ONNX models use.
const std::vector<std::pair<std::string, std::string>> kNpyDtypes = {
    {"<f4", "float32"}, {"<f8", "float64"}, {"<f2", "float16"}, {"<i8", "int64"},
    {"<i4", "int32"},   {"<i2", "int16"},   {"|i1", "int8"},    {"|u1", "uint8"},
    {"|b1", "bool"}};

std::string HeaderValue(const std::string& header, const std::string& key) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) Fail("npy header has no '" + key + "'");
  at = header.find(':', at) + 1;
  while (header[at] == ' ') ++at;
  char close = header[at] == '\'' ? '\'' : header[at] == '(' ? ')' : ',';
  size_t end = header.find(close, at + 1);
  return header.substr(at, end - at + (close == ',' ? 0 : 1));
}

ffi::Tensor ReadNpy(const std::string& path) {
  std::string bytes = ReadFile(path);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) Fail(path + ": not a .npy file");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    offset = 10;
  } else {
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len, offset = 12;
  }
  std::string header = bytes.substr(offset, header_len);
  std::string descr = HeaderValue(header, "descr");
  descr = descr.substr(1, descr.size() - 2);
  if (HeaderValue(header, "fortran_order").find("True") == 0) Fail(path + ": Fortran order is not supported");
  auto dtype = std::find_if(kNpyDtypes.begin(), kNpyDtypes.end(), [&](auto& p) { return p.first == descr; });
  if (dtype == kNpyDtypes.end()) Fail(path + ": unsupported dtype " + descr);
  std::vector<int64_t> shape;
  std::string dims = HeaderValue(header, "shape");  // "(1, 4, 8, 8)" or "(3,)" or "()"
  for (size_t i = 1; i < dims.size();) {
    size_t end = dims.find_first_of(",)", i);
    std::string dim = dims.substr(i, end - i);
    if (dim.find_first_not_of(' ') != std::string::npos) shape.push_back(std::stoll(dim));
    i = end + 1;
  }
  ffi::Tensor tensor = ffi::Tensor::FromNDAlloc(CpuAlloc(), ffi::ShapeView(shape.data(), shape.size()),
                                                ffi::StringToDLDataType(dtype->second), DLDevice{kDLCPU, 0});
  size_t size = ffi::GetDataSize(tensor);
  if (bytes.size() - offset - header_len != size) Fail(path + ": data size does not match its header");
  std::memcpy(tensor.data_ptr(), bytes.data() + offset + header_len, size);
  return tensor;
}

void WriteNpy(const std::string& path, const ffi::Tensor& tensor) {
  std::string name = std::string(ffi::DLDataTypeToString(tensor.dtype()));
  auto dtype = std::find_if(kNpyDtypes.begin(), kNpyDtypes.end(), [&](auto& p) { return p.second == name; });
  if (dtype == kNpyDtypes.end()) Fail("cannot write dtype " + name + " to .npy");
  std::string dims;  // "()", "(3,)", "(2, 3)"
  for (int i = 0; i < tensor.ndim(); ++i) dims += (i ? ", " : "") + std::to_string(tensor.shape()[i]);
  if (tensor.ndim() == 1) dims += ",";
  std::string header = "{'descr': '" + dtype->first + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');  // data starts on a 64-byte boundary
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(static_cast<const char*>(tensor.data_ptr()), ffi::GetDataSize(tensor));
  if (!out) Fail("cannot write " + path);
}

// ---- the manifest ----

std::vector<TensorSpec> Specs(const ffi::json::Object& manifest, const char* key) {
  std::vector<TensorSpec> specs;
  for (const ffi::Any& item : manifest.at(key).cast<ffi::json::Array>()) {
    auto info = item.cast<ffi::json::Object>();
    TensorSpec spec{std::string(info.at("name").cast<ffi::String>()), {},
                    std::string(info.at("dtype").cast<ffi::String>())};
    for (const ffi::Any& dim : info.at("shape").cast<ffi::json::Array>()) spec.shape.push_back(dim.cast<int64_t>());
    specs.push_back(spec);
  }
  return specs;
}

ffi::Tensor RandomInput(const TensorSpec& spec, std::mt19937& rng) {
  ffi::Tensor tensor = ffi::Tensor::FromNDAlloc(CpuAlloc(), ffi::ShapeView(spec.shape.data(), spec.shape.size()),
                                                ffi::StringToDLDataType(spec.dtype), DLDevice{kDLCPU, 0});
  size_t bytes = ffi::GetDataSize(tensor);
  std::memset(tensor.data_ptr(), 0, bytes);
  if (spec.dtype == "float32") {
    std::normal_distribution<float> normal;
    float* data = static_cast<float*>(tensor.data_ptr());
    for (size_t i = 0; i < bytes / sizeof(float); ++i) data[i] = normal(rng);
  }
  return tensor;
}

void CheckInput(const TensorSpec& spec, const ffi::Tensor& tensor, const std::string& path) {
  std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  std::string dtype = std::string(ffi::DLDataTypeToString(tensor.dtype()));
  if (shape != spec.shape || dtype != spec.dtype) {
    std::string want, got;
    for (int64_t d : spec.shape) want += std::to_string(d) + "x";
    for (int64_t d : shape) got += std::to_string(d) + "x";
    Fail(path + ": input '" + spec.name + "' wants " + spec.dtype + "[" + want.substr(0, want.size() - 1) +
         "], the file holds " + dtype + "[" + got.substr(0, got.size() - 1) + "]");
  }
}

// A Relax function returns a tensor or a (nested) tuple of them.
void Flatten(const ffi::Any& value, std::vector<ffi::Tensor>* out) {
  if (auto tensor = value.try_cast<ffi::Tensor>()) {
    out->push_back(*tensor);
  } else if (auto items = value.try_cast<ffi::Array<ffi::Any>>()) {
    for (const ffi::Any& item : *items) Flatten(item, out);
  } else {
    Fail("the model returned something that is not a tensor: " + std::string(value.GetTypeKey()));
  }
}

int Run(int argc, char** argv) {
  std::string artifact, outputs_dir;
  std::vector<std::string> input_paths;
  int repeat = 20;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--inputs") {
      while (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) input_paths.push_back(argv[++i]);
    } else if (arg == "--outputs" && i + 1 < argc) {
      outputs_dir = argv[++i];
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "-h" || arg == "--help") {
      std::cout << "usage: tcl-run ARTIFACT_DIR [--inputs a.npy ...] [--outputs DIR] [--repeat N]\n";
      return 0;
    } else if (artifact.empty() && arg.rfind("--", 0) != 0) {
      artifact = arg;
    } else {
      Fail("unexpected argument " + arg + " (see --help)");
    }
  }
  if (artifact.empty()) Fail("usage: tcl-run ARTIFACT_DIR [--inputs a.npy ...] [--outputs DIR] [--repeat N]");

  ffi::String parse_error;
  ffi::json::Value parsed = ffi::json::Parse(ReadFile(artifact + "/manifest.json"), &parse_error);
  if (!parse_error.empty()) Fail(artifact + "/manifest.json: " + std::string(parse_error));
  auto manifest = parsed.cast<ffi::json::Object>();
  std::vector<TensorSpec> inputs = Specs(manifest, "inputs");
  // TVM's thread pool reads TVM_NUM_THREADS once, when it starts: default to the threads the
  // library was tuned on (its runtime would otherwise take half the CPUs on x86).
  if (manifest.count("threads")) {
    std::string threads = std::to_string(manifest.at("threads").cast<int64_t>());
    setenv("TVM_NUM_THREADS", threads.c_str(), /*overwrite=*/0);
  }

  std::vector<ffi::Tensor> args;
  std::mt19937 rng(0);
  if (!input_paths.empty() && input_paths.size() != inputs.size()) {
    Fail("the model takes " + std::to_string(inputs.size()) + " inputs, " + std::to_string(input_paths.size()) +
         " files given");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (input_paths.empty()) {
      args.push_back(RandomInput(inputs[i], rng));
    } else {
      args.push_back(ReadNpy(input_paths[i]));
      CheckInput(inputs[i], args.back(), input_paths[i]);
    }
  }

  std::string library = artifact + "/" + std::string(manifest.at("library").cast<ffi::String>());
  ffi::Module lib = ffi::Module::LoadFromFile(library);
  ffi::Module vm = lib->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
  constexpr int kPooledAllocator = 2;  // tvm::runtime::memory::AllocatorType::kPooled
  vm->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, kPooledAllocator);
  ffi::Function main_fn = vm->GetFunction("main").value();

  std::vector<ffi::AnyView> packed(args.begin(), args.end());
  ffi::Any result;
  main_fn.CallPacked(packed.data(), static_cast<int32_t>(packed.size()), &result);  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    main_fn.CallPacked(packed.data(), static_cast<int32_t>(packed.size()), &result);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());

  std::vector<ffi::Tensor> outputs;
  Flatten(result, &outputs);
  std::string written;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs_dir.empty()) continue;
    std::string path = outputs_dir + "/output_" + std::to_string(i) + ".npy";
    WriteNpy(path, outputs[i]);
    written += (written.empty() ? "\"" : ", \"") + path + "\"";
  }
  int64_t runtime_threads = ffi::Function::GetGlobalRequired("runtime.NumThreads")().cast<int64_t>();
  std::cout << "{\"outputs\": " << outputs.size() << ", \"written\": [" << written
            << "], \"median_ms\": " << ms[ms.size() / 2] << ", \"repeat\": " << repeat
            << ", \"threads\": " << runtime_threads << "}" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& err) {
    std::string message = err.what();
    message = message.substr(0, message.find('\n'));  // TVM errors carry a traceback after the first line
    std::cerr << "error: " << message << std::endl;
    return 1;
  }
}
