/* Uses the installed sonic from C through sonic/sonic_c.h: samples a small batch on the CPU backend
 * and checks that the greedy row gets the argmax. Exit 0 on success. */
#include <sonic/sonic_c.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    sonic_status st_ = (call);                                                   \
    if (st_ != SONIC_OK) {                                                       \
      fprintf(stderr, "%s failed (%d): %s\n", #call, (int)st_, sonic_last_error()); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

static int run(sonic_sampler* s) {
  static const float logits[2 * 12] = {
      0.1f, 0.5f, -1.0f, 0.5f, 0.0f, 1.0f, 2.4f, -3.0f, 0.2f, 2.45f, 9.0f, 9.0f, /* argmax 9 */
      1.0f, 0.0f, 0.5f,  0.2f, 0.1f, 0.9f, 0.3f, 0.4f,  0.6f, 0.7f,  9.0f, 9.0f,
  }; /* 10 tokens, padded to 12 columns: the padding is masked */
  const int32_t banned[1] = {5};
  sonic_request_params p;
  sonic_logits lv;
  sonic_sample_outputs out;
  int32_t tokens[2] = {-7, -7};
  int32_t status[2] = {-7, -7};
  float logprob[2] = {1.0f, 1.0f};
  uint64_t step = 0;

  sonic_request_params_default(&p);
  p.temperature = 0.0f;
  CHECK(sonic_admit(s, 0, &p, NULL, 0, NULL));
  sonic_request_params_default(&p);
  p.temperature = 0.7f;
  p.seed = 7;
  p.banned_tokens = banned;
  p.banned_count = 1;
  CHECK(sonic_admit(s, 1, &p, NULL, 0, NULL));

  sonic_logits_default(&lv);
  lv.data = logits;
  lv.dtype = SONIC_DTYPE_F32;
  lv.rows = 2;
  lv.cols = 12;
  lv.row_stride = 12;
  sonic_sample_outputs_default(&out);
  out.tokens = tokens;
  out.status = status;
  out.logprob = logprob;
  CHECK(sonic_sample(s, &lv, NULL, NULL, &out, NULL));
  CHECK(sonic_get_step(s, 0, &step));

  printf("sonic C consumer: tokens %d %d, status %d %d, logprob %g, step %llu\n", (int)tokens[0],
         (int)tokens[1], (int)status[0], (int)status[1], (double)logprob[0],
         (unsigned long long)step);
  if (tokens[0] != 9 || status[0] != SONIC_STATUS_OK || !(logprob[0] < 0.0f)) {
    fprintf(stderr, "greedy row: expected token 9, status 0 and a negative logprob\n");
    return 1;
  }
  if (tokens[1] < 0 || tokens[1] >= 10 || tokens[1] == 5 || status[1] != SONIC_STATUS_OK) {
    fprintf(stderr, "random row: expected a token in [0, 10) other than 5, status 0\n");
    return 1;
  }
  if (step != 1) {
    fprintf(stderr, "the step counter did not advance\n");
    return 1;
  }
  /* A bad call reports a status and a message. */
  if (sonic_retire(s, 99, NULL) != SONIC_ERROR_INVALID_ARGUMENT ||
      strstr(sonic_last_error(), "slot = 99") == NULL) {
    fprintf(stderr, "a bad slot was not reported: %s\n", sonic_last_error());
    return 1;
  }
  return 0;
}

int main(void) {
  sonic_config config;
  sonic_sampler* s = NULL;
  int rc;

  if (strcmp(sonic_version(), SONIC_EXPECTED_VERSION) != 0) {
    fprintf(stderr, "sonic_version() = %s, the package says %s\n", sonic_version(),
            SONIC_EXPECTED_VERSION);
    return 1;
  }
  sonic_config_default(&config);
  config.backend = SONIC_BACKEND_CPU;
  config.vocab_size = 10;
  config.max_slots = 2;
  config.max_rows = 2;
  CHECK(sonic_sampler_create(&config, &s));
  rc = run(s);
  sonic_sampler_destroy(s);
  return rc;
}
