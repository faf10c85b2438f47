from advisor.cli.main import entry

entry()
