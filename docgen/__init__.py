"""The documentation site's generated parts: reference pages built from the code in every
``make docs`` (the config file from its JSON Schema, the CLI from its parser, the tables
from their schemas, the error reasons and named errors from the engine), and the code
blocks of the pages, which the tests check against the code. Never installed."""
