// Implements: the memory descriptors and operands the spatial plans share
// (spatial_plans.hpp).
#include "backends/cpu/onednn/engine.hpp"
#include "backends/cpu/onednn/spatial_plans.hpp"

namespace dptrain::onednn {

using dnnl::memory;
using tag = memory::format_tag;

memory::dims spatial_dims(int dims, const SpatialExtent& e) {
  return memory::dims(e.begin(), e.begin() + dims);
}

memory::desc activation_desc(int rows, int channels, int dims, const SpatialExtent& e) {
  memory::dims shape{rows, channels};
  for (auto d : spatial_dims(dims, e)) shape.push_back(d);
  return {shape, memory::data_type::f32, dims == 2 ? tag::nchw : tag::ncdhw};
}

memory::desc blocked_activation_desc(int rows, int channels, int dims, const SpatialExtent& e) {
  const bool avx512 = (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) &
                       static_cast<unsigned>(dnnl_cpu_isa_avx512_core)) ==
                      static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
  const tag layout = dims == 2 ? (avx512 ? tag::nChw16c : tag::nChw8c)
                               : (avx512 ? tag::nCdhw16c : tag::nCdhw8c);
  return {activation_desc(rows, channels, dims, e).dims(), memory::data_type::f32, layout};
}

Operand make_operand(const memory::desc& plain, const memory::desc& wanted, bool output,
                     AlignedBytes& buffer, std::size_t& created) {
  Operand o;
  o.output = output;
  o.plain = memory(plain, cpu_engine(), DNNL_MEMORY_NONE);
  ++created;
  o.reordered = plain != wanted;
  if (!o.reordered) {
    o.inner = o.plain;
    return o;
  }
  o.inner = memory(wanted, cpu_engine(), DNNL_MEMORY_NONE);
  buffer.reserve(wanted.get_size());
  const memory& from = output ? o.inner : o.plain;
  const memory& to = output ? o.plain : o.inner;
  o.convert = dnnl::reorder(dnnl::reorder::primitive_desc(from, to));
  o.convert_args = {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}};
  created += 2;
  return o;
}

void bind(Operand& o, const void* data, const AlignedBytes& buffer) {
  o.plain.set_data_handle(const_cast<void*>(data));
  if (!o.reordered) return;
  o.inner.set_data_handle(buffer.data());
  if (!o.output) execute(o.convert, o.convert_args);
}

void bind_converted(Operand& o, const void* data, const AlignedBytes& buffer) {
  o.plain.set_data_handle(const_cast<void*>(data));
  if (o.reordered) o.inner.set_data_handle(buffer.data());
}

void store(Operand& o) {
  if (o.reordered && o.output) execute(o.convert, o.convert_args);
}

}  // namespace dptrain::onednn
