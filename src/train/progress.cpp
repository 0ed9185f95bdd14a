// Implements: progress lines and metrics events (see progress.hpp).
#include "train/progress.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace dptrain {

Progress::Progress(const MpiSession& mpi, Backend& be, Communicator& comm, MetricsWriter& metrics,
                   PhaseTimer& timer, std::uint64_t total_steps, int terms_per_sample)
    : mpi_(mpi), be_(be), comm_(comm), metrics_(metrics), timer_(timer),
      total_steps_(total_steps), terms_(terms_per_sample), stats_(be, 2) {}

void Progress::add_step(std::uint64_t rows, double ms) {
  train_ms_ += ms;
  interval_ms_ += ms;
  samples_ += rows;
  interval_samples_ += rows;
  ++interval_steps_;
}

void Progress::report(std::uint64_t step, std::uint64_t epoch, float lr, float grad_norm) {
  comm_.allreduce_sum(stats_.get(), 2);
  float host[2] = {0, 0};
  be_.copy_to_host(host, stats_.get(), sizeof host);
  be_.fill(stats_.get(), 0.0f, 2);
  if (mpi_.rank() == 0) {
    const double mean_loss = host[0] / (static_cast<double>(interval_samples_) * terms_);
    const double sps = interval_samples_ / (interval_ms_ / 1000.0);
    const nlohmann::json ms = timer_.per_step_json(static_cast<double>(interval_steps_));
    nlohmann::json event = {{"event", "train"}, {"step", step + 1}, {"epoch", epoch},
                            {"loss", mean_loss}, {"lr", lr}};
    if (grad_norm >= 0.0f) event["grad_norm"] = grad_norm;
    event["samples_per_s"] = std::round(sps);
    if (terms_ > 1) event["tokens_per_s"] = std::round(sps * terms_);
    const bool with_mfu = flops_per_sample_ > 0 && peak_flops_ > 0;
    const double mfu = with_mfu ? sps * flops_per_sample_ / peak_flops_ : 0.0;
    if (with_mfu) event["mfu"] = std::round(mfu * 1e4) / 1e4;
    event["ms"] = ms;
    metrics_.write(event);
    char norm_text[32] = "", rate_text[64];
    if (grad_norm >= 0.0f) std::snprintf(norm_text, sizeof norm_text, " grad_norm %.3g", grad_norm);
    if (terms_ > 1) std::snprintf(rate_text, sizeof rate_text, "%.0f tokens/s", sps * terms_);
    else std::snprintf(rate_text, sizeof rate_text, "%.0f samples/s", sps);
    if (with_mfu) {
      const std::size_t used = std::strlen(rate_text);
      std::snprintf(rate_text + used, sizeof rate_text - used, " mfu %.3f", mfu);
    }
    std::printf("step %llu/%llu epoch %llu loss %.4f%s lr %.3g %s | ms/step data %.2f "
                "fwd %.2f bwd %.2f comm %.2f opt %.2f\n",
                static_cast<unsigned long long>(step + 1),
                static_cast<unsigned long long>(total_steps_),
                static_cast<unsigned long long>(epoch), mean_loss, norm_text, lr, rate_text,
                ms["data"].get<double>(), ms["forward"].get<double>(),
                ms["backward"].get<double>(), ms["comm"].get<double>(),
                ms["optimizer"].get<double>());
    std::fflush(stdout);
  }
  timer_.reset();
  interval_ms_ = 0;
  interval_samples_ = 0;
  interval_steps_ = 0;
}

void Progress::eval(std::uint64_t steps, std::uint64_t epoch, const std::string& set,
                    LossKind loss, const EvalResult& r) {
  if (mpi_.rank() != 0) return;
  nlohmann::json e = {{"event", "eval"}, {"step", steps}, {"epoch", epoch}, {"set", set},
                      {"loss", r.loss}, {"samples", r.samples}};
  // --eval-batches: the line says the evaluation covered part of the set.
  const std::string where =
      set + (r.whole_set ? "" : " (first " + std::to_string(r.samples) + " samples)");
  if (loss == LossKind::kXent) {
    e["accuracy"] = r.accuracy;
    std::printf("eval  step %llu epoch %llu %s: loss %.4f accuracy %.4f\n",
                static_cast<unsigned long long>(steps), static_cast<unsigned long long>(epoch),
                where.c_str(), r.loss, r.accuracy);
  } else {
    std::printf("eval  step %llu epoch %llu %s: loss %.6f\n", static_cast<unsigned long long>(steps),
                static_cast<unsigned long long>(epoch), where.c_str(), r.loss);
  }
  std::fflush(stdout);
  metrics_.write(e);
}

void Progress::summary(std::uint64_t steps, const std::string& device, const MemoryMib& memory) {
  if (mpi_.rank() != 0) return;
  const double wall_s = train_ms_ / 1000.0;
  const double sps = wall_s > 0 ? samples_ / wall_s : 0.0;
  const auto kib = [](double mib) { return std::round(mib * 1024.0) / 1024.0; };  // to the KiB
  metrics_.write({{"event", "summary"}, {"steps", steps}, {"samples", samples_},
                  {"wall_s", std::round(wall_s * 1000.0) / 1000.0},
                  {"samples_per_s", std::round(sps)}, {"ranks", mpi_.size()}, {"device", device},
                  {"memory_mib",
                   {{"params", kib(memory.params)}, {"optimizer", kib(memory.optimizer)},
                    {"peak_device", kib(memory.peak_device)}, {"peak_host", kib(memory.peak_host)},
                    {"activations", kib(memory.activations)},
                    {"peak_buffers", kib(memory.peak_buffers)}}}});
  std::printf("done: %llu steps, %llu samples in %.2f s (%.0f samples/s, %d ranks, %s); "
              "peak memory of a rank: host %.1f MiB, device %.1f MiB\n",
              static_cast<unsigned long long>(steps), static_cast<unsigned long long>(samples_),
              wall_s, sps, mpi_.size(), device.c_str(), memory.peak_host, memory.peak_device);
  std::fflush(stdout);
}

}  // namespace dptrain
