/* pgen_product: one step's product generation in C, a job the pgen workflow manager starts
 * (`pgen manager --product-cmd pgen_product`) in place of `pgen product`.
 *
 *   pgen_product --step S --out DIR [--steps N --params P --levels L --min-size B --max-size B]
 *
 * Joins the workflow's pool (MSTRO_POOL_MANAGER_INFO, given by the manager), requires every
 * field of step S up front, demands each wherever it is (the forecast's ranks, or the
 * archive's copy once the forecast has left), checks its size, every byte and its checksum
 * attribute, writes DIR/step-S.txt (the same product as `pgen product` writes) and offers
 * the product CDO whose OFFER event tells the manager. The attribute schema is
 * examples/pgen/pgen.yaml (MSTRO_SCHEMA_PATH, MSTRO_SCHEMA_LIST). */
#include "pgen.h"

int main(int argc, char **argv) {
  const char *prog = "pgen_product";
  struct pgen_shape shape = pgen_shape(prog, argc, argv, "--step S --out DIR");
  long step = pgen_number(prog, argc, argv, "--step", -1), levels = shape.levels;
  const char *out = pgen_text(argc, argv, "--out");
  long n, i, from_archive = 0;
  mstro_cdo *cdos;
  char (*names)[64];
  char path[4096], partial[4096];
  FILE *f;
  mstro_cdo made;
  int64_t made_step = step;

  if (step < 0 || step >= shape.steps || out == NULL) {
    fprintf(stderr, "usage: pgen_product --step S --out DIR [--steps N --params 1-8 "
                    "--levels L --min-size B --max-size B] (S below N)\n");
    return 2;
  }
  n = pgen_per_step(&shape);
  cdos = calloc((size_t)n, sizeof *cdos);
  names = calloc((size_t)n, sizeof *names);
  if (cdos == NULL || names == NULL) {
    return 1;
  }
  CHECK(mstro_init(NULL, "pgen", 0));
  /* Everything required first: the pool moves each field as soon as it can. */
  for (i = 0; i < n; i++) {
    pgen_field_name(names[i], sizeof names[i], &shape, step, i);
    CHECK(mstro_cdo_declare(names[i], MSTRO_ATTR_DEFAULT, &cdos[i]));
    CHECK(mstro_cdo_require(cdos[i]));
  }
  snprintf(path, sizeof path, "%s/step-%ld.txt", out, step);
  snprintf(partial, sizeof partial, "%s/.step-%ld.txt.partial", out, step);
  f = fopen(partial, "w");
  if (f == NULL) {
    perror(partial);
    return 1;
  }
  fprintf(f, "product of step %ld\n", step);
  for (i = 0; i < n; i++) {
    void *data = NULL;
    int64_t len = -1;
    const uint64_t *sum = NULL;
    const char *source = NULL;
    enum mstro_cdo_attr_value_type ty;
    double total = 0;
    int64_t k;
    CHECK(mstro_cdo_demand(cdos[i]));
    CHECK(mstro_cdo_access_ptr(cdos[i], &data, &len));
    CHECK(mstro_cdo_attribute_get(cdos[i], ".user.pgen.checksum", &ty, (const void **)&sum));
    CHECK(mstro_cdo_attribute_get(cdos[i], ".user.pgen.source", &ty, (const void **)&source));
    if (!pgen_is_field(&shape, names[i], data, len) || *sum != fnv1a(data, (size_t)len)) {
      fprintf(stderr, "pgen_product: %s: %lld bytes, not the forecast's %lld (or its checksum differs)\n",
              names[i], (long long)len, (long long)pgen_field_size(&shape, names[i]));
      return 1;
    }
    from_archive += strcmp(source, "archive") == 0;
    for (k = 0; k < len; k++) {
      total += ((const unsigned char *)data)[k];
    }
    fprintf(f, "%s l%ld %lld bytes checksum %016llx mean %.4f\n", PGEN_PARAMS[i / levels], i % levels,
            (long long)len, (unsigned long long)*sum, total / (double)(len > 0 ? len : 1));
    CHECK(mstro_cdo_dispose(cdos[i]));
  }
  if (fclose(f) != 0 || rename(partial, path) != 0) {
    perror(path);
    return 1;
  }
  printf("pgen_product step %ld: %ld fields checked (%ld from forecast, %ld from archive); "
         "product %s\n",
         step, n, n - from_archive, from_archive, path);
  {
    char name[64];
    snprintf(name, sizeof name, "pgen/product/s%ld", step);
    CHECK(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &made));
  }
  CHECK(mstro_cdo_attribute_set(made, ".user.pgen.kind", (void *)"product", true, false));
  CHECK(mstro_cdo_attribute_set(made, ".user.pgen.step", &made_step, true, false));
  CHECK(mstro_cdo_seal(made));
  CHECK(mstro_cdo_offer(made));
  CHECK(mstro_cdo_withdraw(made));
  CHECK(mstro_cdo_dispose(made));
  CHECK(mstro_finalize());
  free(cdos);
  free(names);
  return 0;
}
