// trainscope/workloads/workload.h — GPT model shapes, from tiny test models to GPT-3 175B.
//
// A workload is a GPT-2-style decoder: token + position embeddings, L pre-LN blocks (causal
// self-attention, GELU MLP with 4C hidden), a final LayerNorm and an LM head tied to the token
// embedding. This header knows shapes and counts only; it has no LibTorch in it, so the tuner's
// models and the command line can use it cheaply.
//
// Dimension vocabulary used across trainscope: B batch, T sequence, C hidden (n_embd),
// L layers, NH heads, HS head size (C/NH), V vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::workloads {

struct Workload {
  std::string name;         // e.g. "gpt2-124m"
  std::string description;  // one line
  int64_t n_layer = 0;      // L
  int64_t n_head = 0;       // NH
  int64_t n_embd = 0;       // C
  int64_t n_positions = 0;  // maximum T (rows of the position embedding)
  int64_t vocab_size = 0;   // V
  std::string source;       // file it was read from
  // What the file asks for that trainscope loads but does not train as asked (a Hugging Face
  // config's dropout), one sentence each; `trainscope run` prints them as notes.
  std::vector<std::string> notes;

  int64_t headSize() const { return n_embd / n_head; }  // HS
  // Analytic parameter count: V*C + Tmax*C + L*(12*C*C + 13*C) + 2*C (tied head).
  int64_t parameterCount() const;
};

// Throws UserError naming the field when a shape is invalid (non-positive, NH not dividing C) or
// absurd (more than 10,000 layers or 1e15 parameters: a typo, and the models would not cope).
void validate(const Workload& w);

// Loads a workload by name (a JSON file in the workloads directory) or by path. A path may also be
// a Hugging Face GPT-2 `config.json` (n_layer/n_head/n_embd/n_positions/vocab_size), recognised by
// its `model_type`. Throws UserError for unknown names, unreadable files, missing, invalid or
// unknown fields (docs/config-reference.md, "Workload files").
Workload load(const std::string& name_or_path);

// Parses a workload from JSON text (either trainscope's or a Hugging Face config).
Workload parse(const std::string& json_text, const std::string& source);

// The directories searched for named workloads: $TRAINSCOPE_WORKLOADS, then the install/source dir.
std::vector<std::string> searchPath();
// Names of the workloads found on the search path, sorted.
std::vector<std::string> available();

}  // namespace trainscope::workloads
