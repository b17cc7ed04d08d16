// Runs a prompt through the reference (llama.cpp's library) as one batch, then
// feeds the given tokens one at a time, and writes every contiguous F32 tensor
// of every graph to a file, for finding the first operation where cairn and
// the reference differ. Record: name (64 bytes), int32 call number and ne[4],
// then the floats. Usage: dump_tensors MODEL OUT PROMPT_IDS [FORCED_IDS]
// (ids comma-separated). Run from the folder of the wanted libggml-cpu-*.so.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {
FILE* out_file = nullptr;
int call_number = 0;

bool on_tensor(ggml_tensor* t, bool ask, void*) {
  if (ask) return true;  // every node
  if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) return true;
  std::vector<float> data((size_t)ggml_nelements(t));
  ggml_backend_tensor_get(t, data.data(), 0, ggml_nbytes(t));
  char name[64] = {};
  std::memcpy(name, t->name, strnlen(t->name, sizeof name - 1));
  const int32_t header[5] = {call_number, (int32_t)t->ne[0], (int32_t)t->ne[1], (int32_t)t->ne[2],
                             (int32_t)t->ne[3]};
  std::fwrite(name, 1, sizeof name, out_file);
  std::fwrite(header, sizeof header[0], 5, out_file);
  std::fwrite(data.data(), sizeof(float), data.size(), out_file);
  return true;
}

std::vector<llama_token> parse_ids(const char* s) {
  std::vector<llama_token> ids;
  for (const char* p = s; *p;) {
    ids.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p) ++p;
  }
  return ids;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: dump_tensors MODEL OUT PROMPT_IDS [FORCED_IDS]\n");
    return 2;
  }
  ggml_backend_load_all();
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  // llama-server's defaults.
  cp.n_ctx = 4096;
  cp.n_batch = 2048;
  cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.cb_eval = on_tensor;
  llama_context* ctx = llama_init_from_model(model, cp);
  out_file = std::fopen(argv[2], "wb");
  if (!ctx || !out_file) return 1;
  const std::vector<llama_token> prompt = parse_ids(argv[3]);
  const std::vector<llama_token> forced = argc > 4 ? parse_ids(argv[4]) : std::vector<llama_token>{};
  llama_batch batch = llama_batch_init((int32_t)prompt.size() + 1, 0, 1);
  batch.n_tokens = (int32_t)prompt.size();
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.token[i] = prompt[i];
    batch.pos[i] = (llama_pos)i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = i + 1 == prompt.size();
  }
  if (llama_decode(ctx, batch)) return 1;
  llama_pos pos = (llama_pos)prompt.size();
  for (llama_token t : forced) {
    ++call_number;
    batch.n_tokens = 1;
    batch.token[0] = t;
    batch.pos[0] = pos++;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    if (llama_decode(ctx, batch)) return 1;
  }
  std::fclose(out_file);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
