// Upper bounds on every count an input may give. Each lies far beyond any machine or model built
// so far, so no real input meets it, and low enough that what it implies fits in memory and in
// the integer types used downstream. Loaders check them when they read the field, before
// anything is allocated, and name the field and the bound in the error.
#pragma once

namespace hetsim::config::limits {

// Cluster. The largest training clusters reported by 2026 hold about 200k GPUs; 2^18 is above
// that. The platform graph costs about 1.2 KiB per GPU (measured: 131k GPUs of dgx-a100, 158 MB,
// 1.9 s on one core), so 2^18 GPUs stay near 320 MB.
inline constexpr long kGpus = 1L << 18;
inline constexpr long kNodes = kGpus;
// Routing keeps the distance between every pair of fabric switches (2 bytes each) and finds
// them by a breadth-first search from each: 8192 switches are 128 MB and about 20 s (measured:
// 8200 switches, dgx-a100 at 32768 nodes, 25 s; 4100 switches 1.9 s).
inline constexpr long kSwitches = 1L << 13;
// NVL72 racks hold 72 GPUs in one NVLink domain, NVL576 576.
inline constexpr long kGpusPerNode = 1024;
inline constexpr long kSms = 4096;  // the H100 has 132, the B200 148

// Model. GPT-3 has 96 layers, Llama 3 405B 126; hidden 16384 and FFN 53248 are the largest
// published dense shapes; vocabularies reach 256k. The bounds keep the products of shapes
// (tokens x hidden x ffn) far inside a double's exact range and every count inside an int.
inline constexpr long kLayers = 1L << 14;
inline constexpr long kHidden = 1L << 20;
inline constexpr long kHeads = 1L << 16;
inline constexpr long kFfn = 1L << 22;
inline constexpr long kVocab = 1L << 24;
// Experts per MoE layer: DeepSeek-V3 routes over 256, each token to 8; 2^16 experts is far
// beyond any published model, and a layer's grouped GEMMs stay one op each.
inline constexpr long kExperts = 1L << 16;
// Tokens in one sequence: million-token contexts exist; 2^24 is sixteen times that.
inline constexpr long kSequence = 1L << 24;

// Plan. Global batches of recent runs hold a few thousand sequences (Llama 3: 16M tokens, 2048
// sequences of 8192). A micro-batch or a global batch of 2^24 sequences is beyond any run.
inline constexpr long kBatch = 1L << 24;
inline constexpr long kMicroBatches = 1L << 20;  // per replica and iteration
inline constexpr long kTokensPerMicroBatch = 1L << 30;

// The work one replay holds: the sum over stage groups of tensor-parallel ranks x micro-batches
// x layers of the stage. The replay stores about 350 bytes of program per replica, micro-batch
// and layer (measured on GPT-3 175B, 1024 A100, global batch 1536 and 6144: 72 MB and 228 MB
// peak) and runs about 0.4 M of these units a second, so 2^25 units bound a run to about 12 GB
// and a few minutes. GPT-3 175B on 1024 A100 is 1.2 M; Llama 3 405B on 16384 H100 is 2.1 M.
inline constexpr long kWorkUnits = 1L << 25;

// Sweeps: `collective --bytes MIN:MAX` sizes.
inline constexpr long kSweepSizes = 4096;

}  // namespace hetsim::config::limits
