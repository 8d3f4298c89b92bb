def make(*args, **kwargs):  # placeholder
    raise NotImplementedError
