// Implements: Dataset (dataset.hpp) on the h5 wrappers: structural checks of
// each file at open (one file, or every file of a list, each holding the
// first one's layout), a bounded-memory validation pass, and hyperslab row
// reads that may span files.
#include "dptrain/data/dataset.hpp"

#include <algorithm>
#include <limits>

#include "data/dataset_validate.hpp"
#include "data/feature_hdf5.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/dataset_files.hpp"

namespace dptrain {
namespace {

#define DPT_DATA_FAIL(msg) ::dptrain::throw_error(ExitCode::kData, (msg), __FILE__, __LINE__)

// Sizes above this are a broken or hostile file, not data we could train on;
// refusing early turns a would-be OOM into a message.
constexpr std::uint64_t kMaxSetBytes = std::uint64_t(1) << 40;
// validate() and the input queue hold at least one whole row, so a bound on
// the set alone would still let one [1, 2^38] row allocate a terabyte.
constexpr std::uint64_t kMaxRowBytes = std::uint64_t(256) << 20;
constexpr std::size_t kMinChunkCache = std::size_t(1) << 20;
constexpr std::size_t kMaxChunkCache = std::size_t(256) << 20;

// a * b, or 0 on overflow (callers reject 0 separately).
std::uint64_t mul_or_zero(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? 0 : r;
}

std::size_t next_prime(std::size_t n) {
  auto prime = [](std::size_t x) {
    for (std::size_t d = 2; d * d <= x; ++d)
      if (x % d == 0) return false;
    return x >= 2;
  };
  while (!prime(n)) ++n;
  return n;
}

// A chunk cache that holds every chunk one row-run touches, so reading row
// by row (full shuffle, streaming) decompresses each chunk once, not per row.
h5::PropList chunk_cache_for(const std::vector<hsize_t>& shape, const std::vector<hsize_t>& chunk,
                             std::size_t elem_bytes) {
  h5::PropList dapl(h5::check(H5Pcreate(H5P_DATASET_ACCESS), ExitCode::kData, "dataset access"));
  if (chunk.size() != shape.size() || chunk.empty()) return dapl;
  std::uint64_t chunk_bytes = elem_bytes, run_chunks = 1;
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    chunk_bytes *= chunk[i];
    if (i > 0) run_chunks *= (shape[i] + chunk[i] - 1) / chunk[i];
  }
  std::size_t bytes = std::clamp<std::uint64_t>(chunk_bytes * run_chunks, kMinChunkCache,
                                                kMaxChunkCache);
  std::size_t slots = next_prime(100 * std::max<std::uint64_t>(1, bytes / chunk_bytes) + 1);
  H5Pset_chunk_cache(dapl.get(), slots, bytes, 1.0);
  return dapl;
}

std::string set_group(const std::string& set) {
  std::string g = set;
  while (!g.empty() && g.front() == '/') g.erase(g.begin());
  return "/" + g;
}

}  // namespace

namespace {

// Features: dtype, rank, shape (as stored, N first) into info.
void read_feature_layout(hid_t feat, const std::string& name, SetInfo& info) {
  h5::DataType ft = h5::type_of(feat);
  const std::optional<FeatureType> type = feature_type_of(ft.get());
  if (!type)
    DPT_DATA_FAIL(name + ": dtype " + h5::type_name(ft.get()) +
                  " is not supported (need float32, float16, int16 or uint8)");
  info.feature_type = *type;
  const std::vector<hsize_t> fshape = h5::shape(feat);
  // [N, F], [N, H, W], [N, C, H, W] or [N, C, D, H, W] (docs/design.md section 3).
  if (fshape.size() < 2 || fshape.size() > 5)
    DPT_DATA_FAIL(name + ": rank " + std::to_string(fshape.size()) + " shape " +
                  h5::shape_string(fshape) +
                  " is not supported (need [N, F], [N, H, W], [N, C, H, W] or [N, C, D, H, W])");
  info.feature_shape.assign(fshape.begin(), fshape.end());
}

// Labels: class ids [N] or targets [N, K] into info; returns their shape.
std::vector<hsize_t> read_label_layout(hid_t lab, const std::string& name, SetInfo& info) {
  h5::DataType lt = h5::type_of(lab);
  const std::vector<hsize_t> lshape = h5::shape(lab);
  const std::string ltype = h5::type_name(lt.get());
  if (ltype == "int32" || ltype == "int64") {
    if (lshape.size() != 1)
      DPT_DATA_FAIL(name + ": " + ltype + " labels of shape " + h5::shape_string(lshape) +
                    " must be [N] class ids (or float32 [N, K] targets)");
    info.label_type = LabelType::kClass;
    info.label_width = 1;
  } else if (ltype == "float32") {
    if (lshape.size() != 2)
      DPT_DATA_FAIL(name + ": float32 labels of shape " + h5::shape_string(lshape) +
                    " must be [N, K] targets (or int32/int64 [N] class ids)");
    info.label_type = LabelType::kTarget;
    info.label_width = lshape[1];
    if (info.label_width == 0) DPT_DATA_FAIL(name + ": targets have width K = 0");
  } else {
    DPT_DATA_FAIL(name + ": dtype " + ltype +
                  " is not supported (need int32/int64 class ids or float32 targets)");
  }
  return lshape;
}

// N and sizes, before anything is allocated: sets info.rows and info.dim.
void check_sizes(const SetPart& m, const std::string& group, const std::vector<hsize_t>& lshape,
                 SetInfo& info) {
  const std::vector<hsize_t> fshape(info.feature_shape.begin(), info.feature_shape.end());
  info.rows = fshape[0];
  if (lshape[0] != fshape[0])
    DPT_DATA_FAIL(m.file + ": " + group + ": features have " + std::to_string(fshape[0]) +
                  " rows but labels have " + std::to_string(lshape[0]));
  if (info.rows == 0) DPT_DATA_FAIL(m.features_name + ": no rows (N = 0)");
  std::uint64_t dim = 1;
  for (std::size_t i = 1; i < fshape.size(); ++i) dim = mul_or_zero(dim, fshape[i]);
  bool zero_dim = std::find(fshape.begin() + 1, fshape.end(), hsize_t(0)) != fshape.end();
  if (zero_dim) DPT_DATA_FAIL(m.features_name + ": shape " + h5::shape_string(fshape) + " has D = 0");
  info.dim = dim;
  const std::uint64_t item = feature_item_bytes(info.feature_type);
  // Checked products: dim * item itself may overflow on a hostile shape.
  const std::uint64_t row_bytes = mul_or_zero(dim, item);
  const std::uint64_t feature_bytes = row_bytes == 0 ? 0 : mul_or_zero(info.rows, row_bytes);
  if (feature_bytes == 0 || feature_bytes > kMaxSetBytes)
    DPT_DATA_FAIL(m.features_name + ": shape " + h5::shape_string(fshape) +
                  " is too large (over 2^40 bytes)");
  if (row_bytes > kMaxRowBytes)
    DPT_DATA_FAIL(m.features_name + ": shape " + h5::shape_string(fshape) +
                  " has rows larger than 256 MiB");
  if (info.label_bytes_per_row() > kMaxRowBytes)
    DPT_DATA_FAIL(m.labels_name + ": shape " + h5::shape_string(lshape) +
                  " has rows larger than 256 MiB");
  const std::uint64_t label_bytes = mul_or_zero(info.rows, mul_or_zero(info.label_width, 4));
  if (label_bytes == 0 || label_bytes > kMaxSetBytes)
    DPT_DATA_FAIL(m.labels_name + ": shape " + h5::shape_string(lshape) +
                  " is too large (over 2^40 bytes)");
}

// A token set's part: /set/tokens [N, T+1] of uint8, uint16 or int32 with an
// integer attribute vocab_size >= 1 (docs/design.md section 3). The features
// are the ids tokens[:, :T], the labels tokens[:, 1:]; one handle reads both.
SetInfo open_token_part(SetPart& m, const std::string& group, SetInfo info) {
  const hid_t f = m.handle.get();
  m.features_name = m.labels_name = m.file + ": " + group + "/tokens";
  const std::string& name = m.features_name;
  h5::DataSet tok = h5::open_dataset(f, group + "/tokens", ExitCode::kData);
  check_virtual_sources(tok.get(), m.file, name);
  const std::string type = h5::type_name(h5::type_of(tok.get()).get());
  if (type != "uint8" && type != "uint16" && type != "int32")
    DPT_DATA_FAIL(name + ": dtype " + type + " is not supported (token ids are uint8, uint16 or int32)");
  const std::vector<hsize_t> shape = h5::shape(tok.get());
  if (shape.size() != 2)
    DPT_DATA_FAIL(name + ": shape " + h5::shape_string(shape) + " is not [N, T+1] windows of token ids");
  if (shape[0] == 0) DPT_DATA_FAIL(name + ": no rows (N = 0)");
  if (shape[1] < 2)
    DPT_DATA_FAIL(name + ": windows of T+1 = " + std::to_string(shape[1]) +
                  " token; a window needs at least 2 (T >= 1 inputs, each followed by its target)");
  if (!h5::has_attr(tok.get(), "vocab_size"))
    DPT_DATA_FAIL(name + ": no vocab_size attribute (the size of the vocabulary, an integer)");
  const std::int64_t vocab = h5::read_attr_int64(tok.get(), "vocab_size", ExitCode::kData);
  if (vocab < 1 || vocab > std::numeric_limits<std::int32_t>::max())
    DPT_DATA_FAIL(name + ": vocab_size " + std::to_string(vocab) + " is not in [1, 2^31)");
  const std::uint64_t row_bytes = mul_or_zero(shape[1], 4);
  if (row_bytes == 0 || row_bytes > kMaxRowBytes || mul_or_zero(shape[0], row_bytes) == 0 ||
      mul_or_zero(shape[0], row_bytes) > kMaxSetBytes)
    DPT_DATA_FAIL(name + ": shape " + h5::shape_string(shape) + " is too large");
  info.vocab_size = static_cast<std::uint64_t>(vocab);
  info.rows = shape[0];
  info.dim = info.label_width = shape[1] - 1;
  info.feature_shape = {shape[0], shape[1] - 1};
  info.feature_type = FeatureType::kTokenId;
  info.label_type = LabelType::kClass;
  const std::vector<hsize_t> chunk = h5::chunk_shape(tok.get());
  info.chunk_rows = chunk.empty() ? 0 : chunk[0];
  tok.reset();
  h5::PropList dapl = chunk_cache_for(shape, chunk, type == "uint8" ? 1 : type == "uint16" ? 2 : 4);
  m.features = h5::open_dataset(f, group + "/tokens", ExitCode::kData, dapl.get());
  return info;
}

// Opens m.file's set `set` into m's handles (features with a chunk cache
// sized from their chunk layout) and checks its structure: datasets exist,
// every source of a virtual dataset exists, ranks, dtypes, N equal, N > 0,
// sizes sane. Returns what the file holds.
SetInfo open_part(SetPart& m, const std::string& set) {
  const std::string& file = m.file;
  SetInfo info;
  info.file = file;
  info.set = set;
  m.handle = h5::open_read(file, ExitCode::kData);
  const hid_t f = m.handle.get();
  const std::string group = set_group(set);
  if (!h5::is_group(f, group)) {
    std::string known;
    for (const auto& s : list_sets(file)) known += (known.empty() ? "" : ", ") + s;
    DPT_DATA_FAIL(file + ": no set '" + set + "' (group " + group + " not found; sets in the file: " +
                  (known.empty() ? "none" : known) + ")");
  }
  if (h5::exists(f, group + "/tokens") && !h5::exists(f, group + "/features"))
    return open_token_part(m, group, info);
  m.features_name = file + ": " + group + "/features";
  m.labels_name = file + ": " + group + "/labels";
  if (!h5::exists(f, group + "/features")) DPT_DATA_FAIL(m.features_name + ": missing");
  if (!h5::exists(f, group + "/labels")) DPT_DATA_FAIL(m.labels_name + ": missing");

  h5::DataSet feat = h5::open_dataset(f, group + "/features", ExitCode::kData);
  check_virtual_sources(feat.get(), file, m.features_name);
  read_feature_layout(feat.get(), m.features_name, info);
  h5::DataSet lab = h5::open_dataset(f, group + "/labels", ExitCode::kData);
  check_virtual_sources(lab.get(), file, m.labels_name);
  const std::vector<hsize_t> lshape = read_label_layout(lab.get(), m.labels_name, info);
  check_sizes(m, group, lshape, info);

  // Reopen the features with a chunk cache sized from their chunk layout.
  const std::vector<hsize_t> chunk = h5::chunk_shape(feat.get());
  info.chunk_rows = chunk.empty() ? 0 : chunk[0];
  feat.reset();
  const std::vector<hsize_t> fshape(info.feature_shape.begin(), info.feature_shape.end());
  h5::PropList dapl = chunk_cache_for(fshape, chunk, feature_item_bytes(info.feature_type));
  m.features = h5::open_dataset(f, group + "/features", ExitCode::kData, dapl.get());
  m.labels = std::move(lab);
  return info;
}

std::string layout_text(const SetInfo& i) {
  if (i.tokens())
    return "token windows of T+1 = " + std::to_string(i.dim + 1) + " with vocab_size " +
           std::to_string(i.vocab_size);
  std::vector<hsize_t> trailing(i.feature_shape.begin() + 1, i.feature_shape.end());
  std::string dims = h5::shape_string(trailing);
  return std::string(feature_type_name(i.feature_type)) + " features [N, " +
         dims.substr(1) + " and " +
         (i.label_type == LabelType::kClass ? std::string("class ids")
                                            : std::to_string(i.label_width) + " float32 targets");
}

// Every listed file must hold what the first one does, but for N.
void check_same_layout(const SetInfo& first, const SetInfo& other, const std::string& list) {
  const bool same = first.feature_type == other.feature_type &&
                    first.vocab_size == other.vocab_size &&
                    first.label_type == other.label_type &&
                    first.label_width == other.label_width &&
                    std::equal(first.feature_shape.begin() + 1, first.feature_shape.end(),
                               other.feature_shape.begin() + 1, other.feature_shape.end());
  if (!same)
    DPT_DATA_FAIL(list + ": " + other.file + ": /" + other.set + " holds " + layout_text(other) +
                  ", but " + first.file + " holds " + layout_text(first) +
                  "; every listed file must hold the same layout");
}

}  // namespace

struct Dataset::Impl {
  std::string set;
  PartPool pool;
  std::vector<std::int32_t> windows;  // token sets: rows [N, T+1] on their way to features and labels
  SetPart& use(std::size_t i) {
    return pool.use(i, [this](SetPart& p) { open_part(p, set); });
  }
};

Dataset::Dataset(const std::string& file, const std::string& set)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.set = set;
  const std::vector<std::string> files =
      is_file_list(file) ? read_file_list(file) : std::vector<std::string>{file};
  std::vector<SetPart>& parts = m.pool.parts();
  parts.resize(files.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    parts[i].file = files[i];
    parts[i].first = total;
    SetInfo part;
    m.pool.use(i, [&](SetPart& p) { part = open_part(p, set); });
    parts[i].rows = part.rows;
    if (i == 0) info_ = part;
    else check_same_layout(info_, part, file);
    total += part.rows;
  }
  info_.file = file;
  info_.rows = total;
  info_.feature_shape[0] = total;
  const std::uint64_t feature_bytes = mul_or_zero(total, info_.feature_bytes_per_row());
  const std::uint64_t label_bytes = mul_or_zero(total, info_.label_bytes_per_row());
  if (feature_bytes == 0 || feature_bytes > kMaxSetBytes || label_bytes == 0 || label_bytes > kMaxSetBytes)
    DPT_DATA_FAIL(file + ": /" + set + ": the listed files hold more than 2^40 bytes");
}

Dataset::~Dataset() = default;


std::int64_t Dataset::validate(std::int64_t num_classes) {
  Impl& m = *impl_;
  std::int64_t max_label = -1;
  for (std::size_t i = 0; i < m.pool.parts().size(); ++i) {
    const SetPart& part = m.use(i);
    max_label = std::max(max_label, info_.tokens() ? validate_token_part(part, info_)
                                                   : validate_part(part, info_, num_classes));
  }
  return max_label;
}

// A token set's rows: each window read once, its first T ids to the
// features and its last T to the labels.
void Dataset::read_token_rows(std::uint64_t begin, std::uint64_t count, void* features, void* labels) {
  Impl& m = *impl_;
  const std::uint64_t t = info_.dim, width = t + 1;
  auto* fout = static_cast<std::int32_t*>(features);
  auto* lout = static_cast<std::int32_t*>(labels);
  for (std::size_t i = count ? m.pool.part_of(begin) : 0; count > 0; ++i) {
    const SetPart& p = m.use(i);
    const std::uint64_t local = begin - p.first, n = std::min(count, p.rows - local);
    m.windows.resize(std::max<std::size_t>(m.windows.size(), n * width));
    h5::read_rows(p.features.get(), H5T_NATIVE_INT32, local, n, m.windows.data(), ExitCode::kData);
    for (std::uint64_t r = 0; r < n; ++r) {
      const std::int32_t* w = m.windows.data() + r * width;
      if (fout) std::copy_n(w, t, fout + r * t);
      if (lout) std::copy_n(w + 1, t, lout + r * t);
    }
    if (fout) fout += n * t;
    if (lout) lout += n * t;
    begin += n;
    count -= n;
  }
}

void Dataset::read_rows(std::uint64_t begin, std::uint64_t count, void* features, void* labels) {
  DPT_REQUIRE(begin <= info_.rows && count <= info_.rows - begin, ExitCode::kOther,
              info_.file + ": /" + info_.set + ": rows [" + std::to_string(begin) + ", " +
                  std::to_string(begin + count) + ") are past the end (" +
                  std::to_string(info_.rows) + " rows)");
  if (info_.tokens()) return read_token_rows(begin, count, features, labels);
  Impl& m = *impl_;
  const hid_t ftype = feature_memory_type(info_.feature_type);
  // HDF5 converts int64 ids to int32 here (clipping); validate() has
  // already refused ids that do not fit.
  const hid_t ltype = info_.label_type == LabelType::kClass ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
  auto* fout = static_cast<unsigned char*>(features);
  auto* lout = static_cast<unsigned char*>(labels);
  // A run of rows may span files: read each file's share of it.
  for (std::size_t i = count ? m.pool.part_of(begin) : 0; count > 0; ++i) {
    const SetPart& p = m.use(i);
    const std::uint64_t local = begin - p.first, n = std::min(count, p.rows - local);
    if (fout) {
      h5::read_rows(p.features.get(), ftype, local, n, fout, ExitCode::kData);
      fout += n * info_.feature_bytes_per_row();
    }
    if (lout) {
      h5::read_rows(p.labels.get(), ltype, local, n, lout, ExitCode::kData);
      lout += n * info_.label_bytes_per_row();
    }
    begin += n;
    count -= n;
  }
}

std::vector<std::string> list_sets(const std::string& file) {
  // A list's sets are those of its first file (every file holds the same).
  if (is_file_list(file)) return list_sets(read_file_list(file).front());
  h5::File f = h5::open_read(file, ExitCode::kData);
  std::vector<std::string> out;
  for (const auto& name : h5::children(f.get())) {
    const std::string g = "/" + name;
    const bool features = h5::is_dataset(f.get(), g + "/features") &&
                          h5::is_dataset(f.get(), g + "/labels");
    if (h5::is_group(f.get(), g) && (features || h5::is_dataset(f.get(), g + "/tokens")))
      out.push_back(name);
  }
  return out;
}

}  // namespace dptrain
