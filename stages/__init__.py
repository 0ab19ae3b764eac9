"""enginecfg subpackage."""
