-- CreateTable
CREATE TABLE "BudgetRefusal" (
    "budgetId" TEXT NOT NULL,
    "periodStart" DATETIME NOT NULL,
    "identityId" TEXT NOT NULL,
    "at" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,

    PRIMARY KEY ("budgetId", "periodStart", "identityId"),
    CONSTRAINT "BudgetRefusal_budgetId_periodStart_fkey" FOREIGN KEY ("budgetId", "periodStart") REFERENCES "BudgetUsage" ("budgetId", "periodStart") ON DELETE CASCADE ON UPDATE CASCADE
);

-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_BudgetUsage" (
    "budgetId" TEXT NOT NULL,
    "periodStart" DATETIME NOT NULL,
    "periodEnd" DATETIME,
    "usedTokens" BIGINT NOT NULL DEFAULT 0,
    "reservedTokens" BIGINT NOT NULL DEFAULT 0,
    "usedMicros" BIGINT NOT NULL DEFAULT 0,
    "reservedMicros" BIGINT NOT NULL DEFAULT 0,
    "raisedTokens" BIGINT NOT NULL DEFAULT 0,
    "raisedMicros" BIGINT NOT NULL DEFAULT 0,

    PRIMARY KEY ("budgetId", "periodStart"),
    CONSTRAINT "BudgetUsage_budgetId_fkey" FOREIGN KEY ("budgetId") REFERENCES "Budget" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);
INSERT INTO "new_BudgetUsage" ("budgetId", "periodEnd", "periodStart", "reservedMicros", "reservedTokens", "usedMicros", "usedTokens") SELECT "budgetId", "periodEnd", "periodStart", "reservedMicros", "reservedTokens", "usedMicros", "usedTokens" FROM "BudgetUsage";
DROP TABLE "BudgetUsage";
ALTER TABLE "new_BudgetUsage" RENAME TO "BudgetUsage";
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;
