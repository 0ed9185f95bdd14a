// The model's layer events (dptrain/model/layer_events.hpp), what the
// parallel strategies and the input pipeline rely on: every listener on a
// LayerEvents list hears every event, in the order they were added; forward
// announces every top-level layer before it runs (also on an empty shard,
// so that a listener's collectives match its peers'); backward announces
// each layer it runs, last first, and grads_ready with the offset of each
// layer with parameters, decreasing and ending with 0.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/model/layer_events.hpp"
#include "dptrain/model/model.hpp"

namespace dptrain {
namespace {

// Writes every event it hears as a word: "F0" before_forward(0), "B2"
// before_backward(2), "|" between_layers, "R12" grads_ready(12).
class EventLog final : public LayerListener {
 public:
  explicit EventLog(std::vector<std::string>& out, std::string tag = {})
      : out_(out), tag_(std::move(tag)) {}
  void before_forward(std::size_t layer) override { put("F" + std::to_string(layer)); }
  void before_backward(std::size_t layer) override { put("B" + std::to_string(layer)); }
  void between_layers() override { put("|"); }
  void grads_ready(std::size_t begin) override { put("R" + std::to_string(begin)); }

 private:
  void put(const std::string& word) { out_.push_back(tag_ + word); }
  std::vector<std::string>& out_;
  std::string tag_;
};

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

class LayerEventsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(BackendOptions{});
};

TEST_F(LayerEventsTest, ForwardAndBackwardAnnounceEveryLayerInOrder) {
  // Layers 0 dense (weight at 0, bias at 12), 1 relu, 2 dense (weight at 15).
  Model m(*be_, parse_model_spec("dense:3,relu,dense:2"), 4, 2);
  m.init(3);
  ASSERT_EQ(m.param_layout()[2].offset, 15u);
  std::vector<float> x(2 * 4, 0.5f);
  std::vector<std::string> words;
  EventLog log(words);
  m.forward(x.data(), 2, &log);
  EXPECT_EQ(joined(words), "F0 | F1 | F2 |");
  words.clear();
  be_->fill(m.output_grad(), 0.1f, 2 * 2);
  m.backward(x.data(), m.output_grad(), 2, &log);
  EXPECT_EQ(joined(words), "B2 R15 | B1 | B0 R0");
}

TEST_F(LayerEventsTest, AnEmptyShardAnnouncesWhatItsPeersDo) {
  Model m(*be_, parse_model_spec("dense:3,relu,dense:2"), 4, 2);
  m.init(3);
  std::vector<std::string> words;
  EventLog log(words);
  m.forward(nullptr, 0, &log);
  EXPECT_EQ(joined(words), "F0 F1 F2");
  words.clear();
  m.backward(nullptr, m.output_grad(), 0, &log);
  // Every layer with parameters, last first, then the whole arena is final.
  EXPECT_EQ(joined(words), "B2 B0 R0");
}

TEST_F(LayerEventsTest, AListPassesEachEventToEveryListenerInOrder) {
  std::vector<std::string> words;
  EventLog a(words, "a"), b(words, "b");
  LayerEvents events{&a, nullptr, &b};
  EXPECT_EQ(events.size(), 2u);
  events.before_forward(1);
  events.between_layers();
  events.before_backward(0);
  events.grads_ready(7);
  EXPECT_EQ(joined(words), "aF1 bF1 a| b| aB0 bB0 aR7 bR7");
  EventLog c(words), d(words), e(words);
  events.add(&c);
  events.add(&d);
  EXPECT_THROW(events.add(&e), Error);
}

}  // namespace
}  // namespace dptrain
