def discharge_if_stateful(jaxpr):
  return jaxpr
